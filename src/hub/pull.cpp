// pull(): list -> select -> write refs -> fetch files on a few threads -> report. Errors from the
// threads are collected and the first is returned after all finish, so no download is abandoned
// half-written by an early return.
#include "hub/pull.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "hub/file-select.h"
#include "hub/http-client.h"
#include "hub/hub-cache.h"
#include "hub/progress.h"

namespace hearth::hub {

namespace {

PullResult make_result(const RepoCache& cache, const std::string& commit, const Selection& sel) {
  PullResult r;
  r.commit = commit;
  r.snapshot_dir = cache.snapshot_dir(commit);
  r.files = sel.files;
  r.model_path = sel.primary.empty() ? r.snapshot_dir : cache.snapshot_path(commit, sel.primary);
  return r;
}

}  // namespace

Result<RepoListing> list_repo_files(const HubEnv& env, const std::string& repo_id,
                                    const std::string& revision, const RetryPolicy& retry) {
  const std::string url =
      env.endpoint + "/api/models/" + repo_id + "/revision/" + url_encode(revision, false);
  int failures = 0;
  std::string last_error;
  for (int attempt = 0; attempt < retry.max_attempts; ++attempt) {
    HttpRequest req;
    req.url = url;
    req.token = env.token;
    req.follow_redirects = true;
    req.stall_timeout_s = retry.stall_timeout_s;
    HttpResponse resp = http_perform(req);
    if (resp.transport == Transport::kOk && resp.status == 200) {
      auto j = nlohmann::json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object())
        return Status::error(url + ": response is not a JSON object");
      RepoListing out;
      if (!j.contains("sha") || !j["sha"].is_string())
        return Status::error(url + ": field 'sha' missing or not a string");
      out.commit = j["sha"].get<std::string>();
      if (!is_commit_hash(out.commit))
        return Status::error(url + ": field 'sha' is not a 40-hex commit id");
      if (!j.contains("siblings") || !j["siblings"].is_array())
        return Status::error(url + ": field 'siblings' missing or not an array");
      for (const auto& s : j["siblings"]) {
        if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
          return Status::error(url + ": siblings[].rfilename missing or not a string");
        std::string name = s["rfilename"].get<std::string>();
        // A path escaping the snapshot folder would write outside the cache.
        if (name.empty() || name.front() == '/' || name.find("..") != std::string::npos ||
            name.find('\0') != std::string::npos)
          return Status::error(url + ": unsafe file name '" + name + "' in siblings");
        out.files.push_back(std::move(name));
      }
      return out;
    }
    if (resp.transport == Transport::kUnreachable)
      return Status::error("cannot reach " + env.endpoint + " (" + resp.transport_error +
                           "); check the network or HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use "
                           "cached models only");
    if (resp.transport == Transport::kOk && resp.status != 429 && resp.status < 500)
      return hub_http_error(env, repo_id, "revision '" + revision + "'", resp.status,
                            resp.header("x-error-code"));
    last_error = resp.transport == Transport::kOk ? "HTTP " + std::to_string(resp.status)
                                                  : resp.transport_error;
    if (++failures >= retry.max_failures_in_a_row) break;
    backoff_sleep(retry, failures);
  }
  return Status::error(repo_id + ": listing files failed after retries (" + last_error + ")");
}

Result<PullResult> resolve_from_cache(const HubEnv& env, const RepoSpec& spec,
                                      const PullOptions& options) {
  RepoCache cache(env.cache_dir, spec.repo_id);
  auto commit = cache.resolve_revision(options.revision);
  if (!commit)
    return Status::error(spec.repo_id + " (revision " + options.revision +
                         ") is not in the cache " + env.cache_dir + "; run `hearth pull " +
                         spec.repo_id + (spec.quant.empty() ? "" : ":" + spec.quant) +
                         "` while online");
  const std::vector<std::string> present = cache.list_snapshot(*commit);
  auto sel = select_files(present, spec.quant, options.include, spec.repo_id);
  if (!sel.is_ok())
    return Status::error(sel.message() +
                         " (looked only in the cache: " + cache.snapshot_dir(*commit) + ")");
  PullResult r = make_result(cache, *commit, sel.value());
  r.offline = true;
  return r;
}

Result<PullResult> pull(const HubEnv& env, const RepoSpec& spec, const PullOptions& options,
                        Progress* progress) {
  if (env.offline) return resolve_from_cache(env, spec, options);
  RepoCache cache(env.cache_dir, spec.repo_id);

  // A pinned commit whose selection is fully cached needs no network at all.
  if (is_commit_hash(options.revision)) {
    if (auto cached = resolve_from_cache(env, spec, options); cached.is_ok()) return cached;
  }
  auto listing = list_repo_files(env, spec.repo_id, options.revision, options.retry);
  if (!listing.is_ok()) {
    if (listing.message().rfind("cannot reach", 0) == 0) {
      if (auto cached = resolve_from_cache(env, spec, options); cached.is_ok()) {
        if (progress) progress->message(listing.message() + "; using the cached snapshot");
        return cached;
      }
    }
    return listing.status();
  }
  const std::string commit = listing->commit;
  HEARTH_ASSIGN_OR_RETURN(Selection sel,
                          select_files(listing->files, spec.quant, options.include, spec.repo_id));
  HEARTH_TRY(cache.ensure_dirs());
  HEARTH_TRY(cache.write_ref(options.revision, commit));

  const size_t n = sel.files.size();
  std::vector<Status> results(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      auto r = fetch_file(env, cache, spec.repo_id, commit, sel.files[i], options.retry, progress);
      results[i] = r.status();
    }
  };
  const int threads = int(std::min<size_t>(n, size_t(std::max(1, options.parallel))));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (const auto& s : results) HEARTH_TRY(s);
  return make_result(cache, commit, sel);
}

}  // namespace hearth::hub
