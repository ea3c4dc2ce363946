// choices.h: `n` checked against the API's limit and the server's slots, and the per-choice jobs.
#include "choices.h"

#include "output-format.h"
#include "tool-calls-api.h"

namespace hearth::server {

bool expand_choices(const nlohmann::json& j, const ApiConfig& cfg, const Engine& engine,
                    CompletionRequest* req, ApiError* err) {
  req->choices = {req->job};
  auto it = j.find("n");
  if (it == j.end() || it->is_null()) return true;
  const bool integer = it->is_number_integer();
  if (!integer || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxChoices ||
      (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(kMaxChoices)))
    return invalid_request(err, "n",
                           "'n' is " + json_text(*it) + "; it must be an integer from 1 to " +
                               std::to_string(kMaxChoices));
  const int n = int(it->get<int64_t>());
  // Each choice decodes in a slot of its own, all at once: a server with fewer slots could
  // never run the request, so it is refused rather than queued forever.
  if (cfg.slots > 0 && n > cfg.slots)
    return invalid_request(err, "n",
                           "'n' is " + std::to_string(n) + " but this server runs " +
                               std::to_string(cfg.slots) + " slots (--parallel); ask for at most " +
                               std::to_string(cfg.slots) + " choices");
  const Job& first = *req->job;
  for (int i = 1; i < n; ++i) {
    auto job = std::make_shared<Job>();
    job->prompt = first.prompt;
    job->generate = first.generate;
    job->generate.sampling.seed = choice_seed(first.generate.sampling.seed, i);
    job->logprobs_top = first.logprobs_top;
    // A constraint follows its own generation's tokens, so each choice compiles its own from
    // the same fields (checked when the first one was made): response_format / grammar, or a
    // required tool call's grammar.
    if (first.generate.constraint) {
      job->generate.constraint = nullptr;
      if (!parse_output_format(j, cfg.limits, engine, job.get(), err)) return false;
      ToolUse tools;
      if (req->chat && !job->generate.constraint &&
          !parse_tool_request(j, cfg, engine, job.get(), &tools, err))
        return false;
      if (!job->generate.constraint)
        return invalid_request(err, "n", "internal error: a choice's constraint was not rebuilt");
    }
    req->choices.push_back(std::move(job));
  }
  return true;
}

}  // namespace hearth::server
