// Fetching one repo file into the cache: HEAD for metadata, then a resumable, verified, locked
// download into blobs/<etag>, then the snapshot symlink. pull.cpp fans this out over files.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "hub/hub-cache.h"
#include "hub/hub-env.h"

namespace hearth::hub {

class Progress;

// Retries cover 5xx/429 answers and dropped or stalled connections. The delay doubles with each
// failure in a row and resets whenever an attempt made progress, so a flaky link that keeps
// delivering data is retried quickly while a dead one gives up after max_failures_in_a_row.
struct RetryPolicy {
  int max_failures_in_a_row = 6;
  int max_attempts = 100;  // hard cap per file, whatever the progress
  int base_delay_ms = 200;
  int max_delay_ms = 8000;
  long stall_timeout_s = 60;  // a connection silent this long counts as dropped
};

struct FileMeta {
  std::string commit;    // X-Repo-Commit
  std::string etag;      // X-Linked-Etag (LFS sha256) or ETag (git blob sha1), unquoted
  uint64_t size = 0;     // X-Linked-Size or Content-Length; 0 = unknown
  std::string location;  // where the bytes are (after the resolve redirect)
};

// HEAD {endpoint}/{repo}/resolve/{revision}/{file}: reads the metadata from the first response
// (the Hub puts X-Linked-* on its 302 to the CDN) and follows only same-host relative redirects
// (renamed repos). 401/403/404 become one-line errors that say what to do.
Result<FileMeta> head_file(const HubEnv& env, const std::string& repo_id,
                           const std::string& revision, const std::string& file,
                           const RetryPolicy& retry);

// Makes snapshots/<commit>/<file> present: reuses the blob when the cache has it, else downloads
// it under the blob's lock into a per-process temp file (resuming any partial file left by a dead
// process), checks size and digest, renames it into blobs/, links it. Returns the snapshot path.
Result<std::string> fetch_file(const HubEnv& env, const RepoCache& cache,
                               const std::string& repo_id, const std::string& commit,
                               const std::string& file, const RetryPolicy& retry,
                               Progress* progress);

// Sleeps the backoff for the n-th failure in a row (n >= 1).
void backoff_sleep(const RetryPolicy& retry, int failures_in_a_row);

// The one-line error for an HTTP status from the Hub, naming the repo and what to do.
Status hub_http_error(const HubEnv& env, const std::string& repo_id, const std::string& what,
                      long status, const std::string& error_code);

}  // namespace hearth::hub
