// The scheduler's side of the KV pool: admission by blocks, making room for a growing sequence
// (cached prefixes evicted least recently used first, then the newest running sequences
// preempted), and preemption itself: the job goes back to the queue's front with its
// generation state and, once admitted again, recomputes its prompt and generated tokens as one
// prefill, then continues as if nothing happened (its client sees the same stream).
#include <algorithm>

#include "runtime/scheduler-slot.h"
#include "runtime/scheduler.h"

namespace hearth {

namespace {

// Positions past the prompt an admitted request should find room for, so a request is not
// admitted only to be preempted at its first token.
constexpr int64_t kDecodeReserveTokens = 16;
// Histories shorter than this are not kept as entries (cheaper to recompute than to hold).
constexpr size_t kMinCachedPrefix = 16;

}  // namespace

int64_t Scheduler::blocks_to_admit(const Group& group) const {
  const Job& first = *group[0];
  const size_t feed = first.resume_ ? first.resume_->feed.size() : first.prompt.size();
  const int64_t positions =
      std::min<int64_t>(int64_t(feed) + kDecodeReserveTokens, options_.ctx_size);
  return pool_->blocks_for(positions) * int64_t(group.size());
}

bool Scheduler::never_fits(const Group& group) const {
  const Job& first = *group[0];
  const size_t feed = first.resume_ ? first.resume_->feed.size() : first.prompt.size();
  return pool_->blocks_for(int64_t(feed)) * int64_t(group.size()) > pool_->total_blocks();
}

// Called on the scheduler thread (take_admissible_locked), so the slots may be read.
bool Scheduler::fits_locked(const Group& group) const {
  int64_t available = pool_->free_blocks();
  for (const auto& s : slots_)
    if (!s->job) available += s->kv.held_blocks();  // cached prefixes: evictable
  for (const auto& c : cached_) available += c->kv.held_blocks();
  return std::min(blocks_to_admit(group), pool_->total_blocks()) <= available;
}

int Scheduler::running_slots() const {
  int n = 0;
  for (const auto& s : slots_) n += s->job ? 1 : 0;
  return n;
}

void Scheduler::forget_cache(Slot& slot) {
  slot.history.clear();
  slot.kv.set_used(0);
  slot.kv.release_unused();
}

bool Scheduler::evict_lru_prefix(const Slot* keep_a, const Slot* keep_b) {
  Slot* lru = nullptr;
  for (auto& s : slots_) {
    if (s->job || s.get() == keep_a || s.get() == keep_b || s->kv.held_blocks() == 0) continue;
    if (!lru || s->last_used < lru->last_used) lru = s.get();
  }
  auto entry = std::min_element(cached_.begin(), cached_.end(), [](const auto& a, const auto& b) {
    return a->last_used < b->last_used;
  });
  if (entry != cached_.end() && (!lru || (*entry)->last_used < lru->last_used)) {
    drop_entry(entry);  // its cache gives its blocks back
  } else if (lru) {
    forget_cache(*lru);
  } else {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  totals_.prefix_evictions++;
  return true;
}

bool Scheduler::history_worth_keeping(const Slot& slot) const {
  return slot.history.size() >= kMinCachedPrefix && slot.kv.held_blocks() > 0;
}

const Scheduler::CachedPrefix* Scheduler::keep_history(Slot& slot) {
  auto entry = std::make_unique<CachedPrefix>();
  entry->kv = std::move(slot.kv);
  entry->tokens = std::move(slot.history);
  entry->last_used = slot.last_used;
  slot.history.clear();
  cached_.push_back(std::move(entry));
  return cached_.back().get();
}

void Scheduler::stash(Slot& slot) {
  if (!history_worth_keeping(slot)) return;
  // The entry goes in first and the oldest one out (entries are bounded in number too: each
  // holds a reservation, and a model's sliding rings), so the cache the slot takes next is
  // usually the one just dropped: on CUDA its granules are still mapped (parked), and the new
  // request's commits take them back with no driver call instead of mapping fresh ones while
  // other caches' parked granules pile up past the limit and get unmapped.
  const CachedPrefix* stashed = keep_history(slot);
  if (int(cached_.size()) > options_.parallel) {
    auto lru = std::min_element(cached_.begin(), cached_.end(), [](const auto& a, const auto& b) {
      return a->last_used < b->last_used;
    });
    drop_entry(lru);
    std::lock_guard<std::mutex> lock(mu_);
    totals_.prefix_evictions++;
  }
  auto fresh = spare_cache();
  if (fresh.is_ok()) {
    slot.kv = std::move(fresh).value();
    // A spare that mapping ahead left out at the start (its parked limit was full then) gets
    // its first block mapped now, while the slot waits for its next request, not in that
    // request's first step (a 7B's 64 granules: ~2-3 ms of every stream's time on an H100).
    slot.kv.prepare_first_block();
    return;
  }
  // No cache to be had (so the entry was not the one dropped: its cache would be the spare):
  // the history goes back to the slot, to be overwritten.
  auto back = std::find_if(cached_.begin(), cached_.end(),
                           [&](const auto& c) { return c.get() == stashed; });
  slot.kv = std::move((*back)->kv);
  slot.history = std::move((*back)->tokens);
  cached_.erase(back);
}

void Scheduler::drop_entry(std::vector<std::unique_ptr<CachedPrefix>>::iterator entry) {
  KvCache kv = std::move((*entry)->kv);
  cached_.erase(entry);
  keep_spare(std::move(kv));
}

void Scheduler::keep_spare(KvCache kv) {
  kv.set_used(0);
  kv.release_unused();  // its blocks go back to the pool now
  if (int(spare_kv_.size()) < options_.parallel) spare_kv_.push_back(std::move(kv));
}

Result<KvCache> Scheduler::spare_cache() {
  if (spare_kv_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      totals_.kv_caches_made++;
    }
    return engine_->model().new_kv_cache(options_.ctx_size, options_.kv_types, pool_);
  }
  KvCache kv = std::move(spare_kv_.back());
  spare_kv_.pop_back();
  return kv;
}

bool Scheduler::make_spare() {
  // Every stash takes a spare until the entries reach their bound; then drops give them back.
  if (spare_kv_.size() + cached_.size() >= size_t(options_.parallel)) return false;
  auto kv = engine_->model().new_kv_cache(options_.ctx_size, options_.kv_types, pool_);
  // (A sliding-window model's cache commits its rings whole: not made ahead of need.)
  if (!kv.is_ok() || kv->ring_bytes() > 0) return false;
  spare_kv_.push_back(std::move(kv).value());
  return true;
}

Status Scheduler::warm_up() {
  const int64_t others = int64_t(slots_.size()) - 1;
  const int64_t chunk =
      std::min({options_.warm_up_tokens, options_.batch_tokens - others, options_.ctx_size - 1});
  if (chunk < 1) return Status::ok();
  const Model& model = engine_->model();
  std::vector<int32_t> tokens;
  std::vector<BatchSegment> segs;
  bool room = true;
  for (size_t i = 0; i < slots_.size() && room; ++i) {
    const int64_t n = i == 0 ? chunk : 1;
    // A pool too small for the pass: no warm-up (requests size what they use, as before).
    room = slots_[i]->kv.ensure(n + 1).is_ok();
    segs.push_back({&slots_[i]->kv, 0, n, false});
    tokens.insert(tokens.end(), size_t(n), 0);
  }
  const std::vector<uint8_t> no_logits(segs.size(), 0);  // every row picked on the backend
  Status st;
  if (room) st = model.forward_picks(tokens, segs, scratch_, no_logits, {}, &logits_, &picked_);
  if (room && st.is_ok()) {  // then every slot decodes its next token
    tokens.assign(segs.size(), 0);
    for (auto& s : segs) s.pos0 += s.n_tokens, s.n_tokens = 1;
    st = model.forward_picks(tokens, segs, scratch_, no_logits, {}, &logits_, &picked_);
  }
  // Then one prompt alone at each halving of the chunk: a backend may choose its kernels by a
  // pass's size (the CUDA prefill GEMMs take an algorithm per power-of-two bucket of tokens, the
  // batched matmul another form below 129), and a size first met by a request costs that
  // request its choice and kernel loads (H200, 7B: a first 139-token step 38-40 ms against 17).
  const std::vector<uint8_t> no_logits_one(1, 0);
  for (int64_t n = chunk / 2; room && st.is_ok() && n >= 64; n /= 2) {
    slots_[0]->kv.set_used(0);
    const std::vector<BatchSegment> one{{&slots_[0]->kv, 0, n, false}};
    st = model.forward_picks(std::vector<int32_t>(size_t(n), 0), one, scratch_, no_logits_one, {},
                             &logits_, &picked_);
  }
  for (auto& slot : slots_) {
    slot->kv.set_used(0);
    slot->kv.release_unused();
  }
  return st;
}

Scheduler::CachedPrefix* Scheduler::best_cached_prefix(const std::vector<int32_t>& feed,
                                                       size_t limit, size_t* len) {
  CachedPrefix* best = nullptr;
  *len = 0;
  for (auto& c : cached_) {
    size_t n = 0;
    while (n < c->tokens.size() && n < feed.size() && c->tokens[n] == feed[n]) ++n;
    n = size_t(c->kv.reusable_prefix(int64_t(std::min(n, limit))));
    if (n > *len) {
      best = c.get();
      *len = n;
    }
  }
  return best;
}

void Scheduler::adopt(Slot& slot, CachedPrefix* entry) {
  auto it =
      std::find_if(cached_.begin(), cached_.end(), [&](const auto& c) { return c.get() == entry; });
  std::unique_ptr<CachedPrefix> taken = std::move(*it);
  cached_.erase(it);
  // The slot's own history takes the adopted entry's place (the entries' count is unchanged),
  // or, too short to keep, its cache becomes a spare. Either way no cache is made or freed: the
  // slot used to stash its history into a spare and drop that spare at once for the adopted
  // cache, so once the spares ran out every adoption made a cache and freed one (on CUDA 64
  // address reservations and their unmapping: ~30-40 ms a request on an H200).
  if (history_worth_keeping(slot))
    keep_history(slot);
  else
    keep_spare(std::move(slot.kv));
  slot.kv = std::move(taken->kv);
  slot.history = std::move(taken->tokens);
}

Scheduler::Room Scheduler::make_room(Slot& slot, int64_t positions,
                                     const std::vector<Slot*>& in_step) {
  while (!slot.kv.ensure(positions).is_ok()) {
    if (positions > slot.kv.capacity()) return Room::kWait;
    if (evict_lru_prefix(&slot)) continue;
    // The newest running sequence admitted after this one and not in this step's batch; a
    // request's choices waiting on (or for) a shared prompt stay together.
    Slot* victim = nullptr;
    for (auto& s : slots_) {
      Slot* c = s.get();
      if (c == &slot || !c->job || c->leader || c->last_used <= slot.last_used) continue;
      if (std::find(in_step.begin(), in_step.end(), c) != in_step.end()) continue;
      const bool leads = std::any_of(slots_.begin(), slots_.end(),
                                     [&](const auto& f) { return f->leader == c && f->job; });
      if (leads) continue;
      if (!victim || c->last_used > victim->last_used) victim = c;
    }
    if (!victim) return Room::kWait;
    preempt(*victim);
  }
  return Room::kOk;
}

void Scheduler::preempt(Slot& slot) {
  auto job = std::move(slot.job);
  auto resume = std::make_shared<Job::Resume>();
  if (slot.pending >= 0) {  // decoding: everything it holds, then the token not yet fed
    resume->feed = slot.history;
    resume->feed.push_back(slot.pending);
  } else {  // still prefilling: the same tokens from the start
    resume->feed = std::move(slot.feed);
  }
  resume->step = std::move(slot.step);
  resume->generated = slot.generated;
  resume->admitted = slot.last_used;
  job->resume_ = std::move(resume);
  slot.job.reset();
  slot.pending = -1;
  slot.leader = nullptr;
  slot.feed.clear();
  forget_cache(slot);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    queue_.push_front({job});
    totals_.preemptions++;
  }
}

}  // namespace hearth
