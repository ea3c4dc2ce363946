// ReasoningSplitter: a three-state scanner (before any text, inside the think block, after it)
// with a held-back tail no longer than a tag minus one, plus the newlines that may precede it.
#include "runtime/reasoning-split.h"

#include "runtime/stop-strings.h"

#include <algorithm>

namespace hearth {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_newline(char c) {
  return c == '\n' || c == '\r';
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool starts_inside)
    : state_(starts_inside ? State::kReasoning : State::kStart),
      skip_newlines_(starts_inside),
      saw_reasoning_(starts_inside) {}

ReasoningPieces ReasoningSplitter::push(std::string_view text) {
  ReasoningPieces out;
  held_ += text;
  if (state_ == State::kStart) take_start(&out);
  if (state_ == State::kReasoning) take_reasoning(&out);
  if (state_ == State::kContent) {
    if (skip_newlines_) {
      const size_t n = std::find_if_not(held_.begin(), held_.end(), is_newline) - held_.begin();
      held_.erase(0, n);
      skip_newlines_ = held_.empty();
    }
    out.content += held_;
    held_.clear();
  }
  return out;
}

// Before any visible text: whitespace and a prefix of "<think>" wait; anything else is content.
void ReasoningSplitter::take_start(ReasoningPieces*) {
  const size_t lead = std::find_if_not(held_.begin(), held_.end(), is_space) - held_.begin();
  const std::string_view rest = std::string_view(held_).substr(lead);
  if (rest.size() >= kOpen.size() && rest.substr(0, kOpen.size()) == kOpen) {
    held_.erase(0, lead + kOpen.size());
    state_ = State::kReasoning;
    skip_newlines_ = true;
    saw_reasoning_ = true;
  } else if (rest.size() >= kOpen.size() || rest != kOpen.substr(0, rest.size())) {
    state_ = State::kContent;  // held_ (whitespace included) goes out as content
  }
}

// Inside the block: everything up to "</think>", holding back a partial tag and the newlines
// before it (the reasoning is trimmed of those).
void ReasoningSplitter::take_reasoning(ReasoningPieces* out) {
  if (skip_newlines_) {
    const size_t n = std::find_if_not(held_.begin(), held_.end(), is_newline) - held_.begin();
    held_.erase(0, n);
    if (held_.empty()) return;
    skip_newlines_ = false;
  }
  const size_t at = held_.find(kClose);
  if (at != std::string::npos) {
    size_t end = at;
    while (end > 0 && is_newline(held_[end - 1])) --end;
    out->reasoning += held_.substr(0, end);
    held_.erase(0, at + kClose.size());
    state_ = State::kContent;
    skip_newlines_ = true;
    return;
  }
  size_t keep = partial_match_suffix(held_, kClose);
  while (keep < held_.size() && is_newline(held_[held_.size() - keep - 1])) ++keep;
  out->reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

ReasoningPieces ReasoningSplitter::flush() {
  ReasoningPieces out;
  if (state_ == State::kReasoning)
    out.reasoning = std::move(held_);
  else
    out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningPieces ReasoningSplitter::take(std::string_view text, bool last) {
  ReasoningPieces out = push(text);
  if (last) {
    ReasoningPieces tail = flush();
    out.reasoning += tail.reasoning;
    out.content += tail.content;
  }
  return out;
}

ReasoningPieces split_reasoning(std::string_view text, bool starts_inside) {
  return ReasoningSplitter(starts_inside).take(text, true);
}

bool prompt_opens_reasoning(std::string_view prompt_tail) {
  size_t end = prompt_tail.size();
  while (end > 0 && is_space(prompt_tail[end - 1])) --end;
  return end >= kOpen.size() && prompt_tail.substr(end - kOpen.size(), kOpen.size()) == kOpen;
}

}  // namespace hearth
