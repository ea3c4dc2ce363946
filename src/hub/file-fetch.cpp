// One file's journey into the cache. Invariants: blobs/<etag> only ever appears complete and
// verified (rename of the temp file), the temp file only ever holds a prefix of the right bytes,
// and only the holder of .locks/.../<etag>.lock writes either.
#include "hub/file-fetch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "hub/digest.h"
#include "hub/http-client.h"
#include "hub/progress.h"

namespace fs = std::filesystem;

namespace hearth::hub {

namespace {

std::string normalize_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

uint64_t parse_u64(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  return (errno || !end || *end) ? 0 : uint64_t(v);
}

std::string unreachable_message(const HubEnv& env, const std::string& detail) {
  return "cannot reach " + env.endpoint + " (" + detail +
         "); check the network or HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use cached models only";
}

bool retryable_status(long status) {
  return status >= 500 || status == 429 || status == 408;
}

uint64_t file_size_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? uint64_t(st.st_size) : 0;
}

// Moves a partial download left by a dead process (ours hold the lock now) to our temp name, so
// its bytes are resumed rather than fetched again. Keeps the longest, removes the rest.
void adopt_leftover_partials(const std::string& blob, const std::string& temp) {
  const fs::path dir = fs::path(blob).parent_path();
  const std::string prefix = fs::path(blob).filename().string() + ".";
  std::error_code ec;
  std::string best;
  uintmax_t best_size = 0;
  std::vector<std::string> others;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->path().string() == temp || name.rfind(prefix, 0) != 0) continue;
    if (name.size() < 11 || name.compare(name.size() - 11, 11, ".incomplete") != 0) continue;
    uintmax_t sz = fs::file_size(it->path(), ec);
    if (ec) continue;
    if (best.empty() || sz > best_size) {
      if (!best.empty()) others.push_back(best);
      best = it->path().string();
      best_size = sz;
    } else {
      others.push_back(it->path().string());
    }
  }
  if (!best.empty() && !fs::exists(temp)) ::rename(best.c_str(), temp.c_str());
  for (const auto& o : others) ::unlink(o.c_str());
}

Status check_free_space(const std::string& dir, uint64_t needed) {
  struct statvfs vfs {};
  if (needed == 0 || statvfs(dir.c_str(), &vfs) != 0) return Status::ok();
  const uint64_t avail = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
  if (avail < needed)
    return Status::error("disk full: " + human_bytes(double(needed)) + " needed in " + dir +
                         " but only " + human_bytes(double(avail)) +
                         " is free (free some space or point HF_HUB_CACHE elsewhere)");
  return Status::ok();
}

}  // namespace

void backoff_sleep(const RetryPolicy& retry, int failures_in_a_row) {
  int64_t ms = retry.base_delay_ms;
  for (int i = 1; i < failures_in_a_row && ms < retry.max_delay_ms; ++i) ms *= 2;
  ms = std::min<int64_t>(ms, retry.max_delay_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

Status hub_http_error(const HubEnv& env, const std::string& repo_id, const std::string& what,
                      long status, const std::string& error_code) {
  const std::string repo_url = env.endpoint + "/" + repo_id;
  if (status == 401) {
    if (env.token.empty())
      return Status::error(repo_id +
                           ": 401 Unauthorized: the repo is gated or private and no token "
                           "is set; create a token at " +
                           env.endpoint +
                           "/settings/tokens and set HF_TOKEN=hf_... (or save it in "
                           "~/.cache/huggingface/token)");
    return Status::error(repo_id + ": 401 Unauthorized: the token from " + env.token_source +
                         " was rejected; check HF_TOKEN");
  }
  if (status == 403)
    return Status::error(repo_id +
                         ": 403 Forbidden: this gated repo needs access granted to your "
                         "account; request it at " +
                         repo_url + " and use that account's token in HF_TOKEN");
  if (status == 404) {
    if (error_code == "RevisionNotFound")
      return Status::error(repo_id + ": " + what + ": revision not found (404)");
    if (error_code == "EntryNotFound")
      return Status::error(repo_id + ": " + what + " not found in the repo (404)");
    return Status::error(repo_id + ": repository not found at " + env.endpoint +
                         " (404; check the name, and private repos need HF_TOKEN)");
  }
  return Status::error(repo_id + ": " + what + ": HTTP " + std::to_string(status) + " from " +
                       env.endpoint);
}

Result<FileMeta> head_file(const HubEnv& env, const std::string& repo_id,
                           const std::string& revision, const std::string& file,
                           const RetryPolicy& retry) {
  std::string url = env.endpoint + "/" + repo_id + "/resolve/" + url_encode(revision, false) + "/" +
                    url_encode(file, true);
  int failures = 0, redirects = 0;
  std::string last_error;
  for (int attempt = 0; attempt < retry.max_attempts; ++attempt) {
    HttpRequest req;
    req.url = url;
    req.head = true;
    req.token = env.token;
    req.stall_timeout_s = retry.stall_timeout_s;
    HttpResponse resp = http_perform(req);
    if (resp.transport == Transport::kOk && !retryable_status(resp.status)) {
      const std::string etag =
          normalize_etag(!resp.header("x-linked-etag").empty() ? resp.header("x-linked-etag")
                                                               : resp.header("etag"));
      const bool redirect = resp.status >= 300 && resp.status < 400;
      if (redirect && etag.empty()) {
        // No metadata on this hop (a renamed repo): follow it, a bounded number of times.
        if (++redirects > 5) return Status::error(repo_id + "/" + file + ": too many redirects");
        url = resolve_url(url, resp.header("location"));
        continue;
      }
      if (!redirect && (resp.status < 200 || resp.status >= 300))
        return hub_http_error(env, repo_id, file, resp.status, resp.header("x-error-code"));
      FileMeta meta;
      meta.commit = resp.header("x-repo-commit");
      meta.etag = etag;
      meta.size = parse_u64(resp.header("x-linked-size"));
      if (meta.size == 0) meta.size = parse_u64(resp.header("content-length"));
      meta.location = redirect ? resolve_url(url, resp.header("location")) : url;
      if (meta.etag.empty() || meta.etag.find('/') != std::string::npos || meta.etag == "." ||
          meta.etag == "..")
        return Status::error(repo_id + "/" + file +
                             ": the server sent no usable ETag, so the file "
                             "cannot be verified or cached (is HF_ENDPOINT a Hugging Face hub?)");
      if (meta.commit.empty())
        return Status::error(repo_id + "/" + file +
                             ": the server sent no X-Repo-Commit header "
                             "(is HF_ENDPOINT a Hugging Face hub?)");
      return meta;
    }
    last_error = resp.transport == Transport::kOk ? "HTTP " + std::to_string(resp.status)
                                                  : resp.transport_error;
    if (resp.transport == Transport::kUnreachable && failures >= 1)
      return Status::error(unreachable_message(env, resp.transport_error));
    if (++failures >= retry.max_failures_in_a_row) break;
    backoff_sleep(retry, failures);
  }
  return Status::error(repo_id + "/" + file + ": metadata request failed after retries (" +
                       last_error + ")");
}

Result<std::string> fetch_file(const HubEnv& env, const RepoCache& cache,
                               const std::string& repo_id, const std::string& commit,
                               const std::string& file, const RetryPolicy& retry,
                               Progress* progress) {
  const std::string snap = cache.snapshot_path(commit, file);
  if (cache.has_snapshot_file(commit, file)) {
    if (progress) progress->finish(file, true, "already in the cache");
    return snap;
  }
  HEARTH_ASSIGN_OR_RETURN(FileMeta meta, head_file(env, repo_id, commit, file, retry));
  const std::string blob = cache.blob_path(meta.etag);
  auto blob_ready = [&] {
    std::error_code ec;
    return fs::is_regular_file(blob, ec) &&
           (meta.size == 0 || fs::file_size(blob, ec) == meta.size);
  };
  if (!blob_ready()) {
    HEARTH_ASSIGN_OR_RETURN(
        FileLock lock, FileLock::acquire(cache.lock_path(meta.etag), [&] {
          if (progress) progress->message(file + ": another process is downloading it; waiting");
        }));
    if (!blob_ready()) {  // the other process may have finished it while we waited
      const std::string temp = blob + "." + std::to_string(::getpid()) + ".incomplete";
      adopt_leftover_partials(blob, temp);
      int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) return Status::error(temp + ": cannot create: " + std::strerror(errno));
      struct FdCloser {
        int fd;
        ~FdCloser() {
          if (fd >= 0) ::close(fd);
        }
      } closer{fd};
      uint64_t offset = file_size_of(fd);
      if (meta.size && offset > meta.size) {
        if (::ftruncate(fd, 0) != 0) return Status::error(temp + ": truncate failed");
        offset = 0;
      }
      HEARTH_TRY(check_free_space(fs::path(blob).parent_path().string(),
                                  meta.size > offset ? meta.size - offset : 0));
      if (progress) progress->start(file, meta.size, offset);

      int failures = 0;
      std::string last_error;
      bool complete = false;
      for (int attempt = 0; attempt < retry.max_attempts && !complete; ++attempt) {
        if (meta.size && offset == meta.size) {
          complete = true;
          break;
        }
        HttpRequest req;
        req.url = meta.location;
        req.follow_redirects = true;
        if (same_origin(meta.location, env.endpoint)) req.token = env.token;
        req.range_start = offset;
        req.body_fd = fd;
        req.stall_timeout_s = retry.stall_timeout_s;
        const uint64_t base = offset;
        req.on_bytes = [&, base](uint64_t n) {
          if (progress) progress->update(file, base + n);
        };
        HttpResponse resp = http_perform(req);
        if (resp.range_ignored) offset = 0;  // the file was restarted from byte 0
        offset += resp.file_bytes;
        if (resp.range_mismatch) {
          if (::ftruncate(fd, 0) != 0) return Status::error(temp + ": truncate failed");
          offset = 0;
        }
        if (resp.file_bytes > 0) failures = 0;  // progress resets the backoff

        if (resp.transport == Transport::kWriteFailed) {
          const int e = resp.write_errno;
          if (e == ENOSPC || e == EDQUOT)
            return Status::error("disk full while writing " + temp +
                                 " (free some space or point HF_HUB_CACHE elsewhere; the partial "
                                 "download is kept and will resume)");
          if (e == EFBIG)
            return Status::error(temp +
                                 ": write failed: the file size limit (ulimit -f) was "
                                 "reached; the partial download is kept and will resume");
          return Status::error(temp + ": write failed: " + std::strerror(e));
        }
        if (resp.transport == Transport::kOk) {
          const long st = resp.status;
          if (st == 200 || st == 206) {
            if (meta.size == 0 || offset == meta.size) {
              complete = true;
              break;
            }
            if (offset > meta.size) {  // more bytes than announced: start over cleanly
              if (::ftruncate(fd, 0) != 0) return Status::error(temp + ": truncate failed");
              offset = 0;
            }
            last_error = "response ended early at byte " + std::to_string(offset);
          } else if (st == 416) {
            if (::ftruncate(fd, 0) != 0) return Status::error(temp + ": truncate failed");
            offset = 0;
            last_error = "HTTP 416 for our range";
          } else if (retryable_status(st)) {
            last_error = "HTTP " + std::to_string(st);
          } else {
            return hub_http_error(env, repo_id, file, st, resp.header("x-error-code"));
          }
        } else {
          last_error = resp.transport_error;
        }
        if (++failures >= retry.max_failures_in_a_row) break;
        backoff_sleep(retry, failures);
      }
      if (!complete) {
        if (progress) progress->finish(file, false);
        return Status::error(repo_id + "/" + file + ": download failed (" + last_error +
                             "); the partial file is kept and the next pull resumes it");
      }
      ::fdatasync(fd);
      ::close(fd);
      closer.fd = -1;
      if (meta.size) {
        std::error_code ec;
        const uint64_t got = fs::file_size(temp, ec);
        if (got != meta.size) {
          ::unlink(temp.c_str());
          return Status::error(repo_id + "/" + file + ": size mismatch: expected " +
                               std::to_string(meta.size) + " bytes, got " + std::to_string(got));
        }
      }
      if (Status v = verify_against_etag(temp, meta.etag); !v.is_ok()) {
        ::unlink(temp.c_str());
        if (progress) progress->finish(file, false, "rejected: checksum mismatch");
        return v.with_context(repo_id + "/" + file);
      }
      ::chmod(temp.c_str(), 0644);
      if (::rename(temp.c_str(), blob.c_str()) != 0)
        return Status::error(blob + ": rename failed: " + std::strerror(errno));
      if (progress)
        progress->finish(file, true,
                         meta.etag.size() == 64   ? "done, sha256 verified"
                         : meta.etag.size() == 40 ? "done, git sha1 verified"
                                                  : "done");
    } else if (progress) {
      progress->finish(file, true, "fetched by another process");
    }
  } else if (progress) {
    progress->finish(file, true, "blob already in the cache");
  }
  HEARTH_TRY(cache.link_snapshot_file(commit, file, meta.etag));
  return snap;
}

}  // namespace hearth::hub
