// The hub client against fixture-hub.py on loopback, through the library: byte-exact downloads
// under injected faults (drops, 500s, corruption, slowness, 401), resume, two processes on one
// file, offline resolution, and the cache layout huggingface_hub expects.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "fixture-hub.h"
#include "hub/digest.h"
#include "hub/progress.h"
#include "hub/pull.h"
#include "hub/repo-spec.h"
#include "support/test-data.h"

namespace fs = std::filesystem;

namespace hearth::hub {
namespace {

using test::FixtureHub;

const std::string kQ4 = "llama3-tiny-q4_0.gguf";
std::string golden(const std::string& rel) {
  return test::shared_path("goldens/" + rel);
}
std::string q4_src() {
  return golden("llama3-tiny/" + kQ4);
}

HubEnv env_for(const FixtureHub& hub, const std::string& cache) {
  HubEnv env;
  env.endpoint = hub.endpoint();
  env.cache_dir = cache;
  return env;
}

RepoSpec spec(const std::string& text) {
  return parse_repo_spec(text).value();
}

bool same_bytes(const std::string& a, const std::string& b) {
  return fs::file_size(a) == fs::file_size(b) && test::read_file(a) == test::read_file(b);
}

// Files under blobs/ whose name is not a final blob (temp or partial downloads).
int leftover_partials(const std::string& repo_dir) {
  int n = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(repo_dir + "/blobs", ec)) {
    if (e.path().filename().string().find('.') != std::string::npos) ++n;
  }
  return n;
}

std::string q4_repo(const std::string& name) {
  const std::string root = test::fresh_dir(name + "-root");
  test::make_repo(root, "test/tiny-GGUF",
                  {{kQ4, q4_src()},
                   {"llama3-tiny-bf16.gguf", golden("llama3-tiny/llama3-tiny-bf16.gguf")},
                   {"README.md", golden("README.md")}});
  return root;
}

TEST(HubPull, QuantPickedAndByteExact) {
  auto hub = FixtureHub::start(q4_repo("quant"));
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("quant-cache");
  Progress quiet(Progress::Mode::kQuiet);
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:q4_0"), {}, &quiet);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->files, std::vector<std::string>{kQ4});
  EXPECT_EQ(r->model_path, r->snapshot_dir + "/" + kQ4);
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
  // Only the chosen quantization travelled.
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);
  // A second pull finds it in the cache and downloads nothing.
  auto again = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, &quiet);
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);
  EXPECT_EQ(hub->count("HEAD", "/test/tiny-GGUF/resolve/"), 1);
}

TEST(HubPull, DroppedTenTimesStillByteExact) {
  auto hub = FixtureHub::start(q4_repo("drop"), {"--drop", kQ4 + "=10"});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("drop-cache");
  Progress quiet(Progress::Mode::kQuiet);
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, &quiet);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
  int dropped = 0, ranged = 0;
  for (const auto& l : hub->log_lines()) {
    if (l.rfind("GET /cdn/", 0) != 0) continue;
    if (l.find(" dropped") != std::string::npos) ++dropped;
    if (l.find("bytes=") != std::string::npos) ++ranged;
  }
  EXPECT_EQ(dropped, 10);
  EXPECT_EQ(ranged, 10);  // every retry resumed with Range instead of starting over
  EXPECT_EQ(leftover_partials(cache + "/models--test--tiny-GGUF"), 0);
}

TEST(HubPull, IgnoredRangeRestartsCleanly) {
  auto hub = FixtureHub::start(q4_repo("norange"), {"--drop", kQ4 + "=2", "--ignore-range"});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("norange-cache");
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
}

TEST(HubPull, CorruptBytesRejectedNothingInSnapshots) {
  auto hub = FixtureHub::start(q4_repo("corrupt"), {"--corrupt", kQ4});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("corrupt-cache");
  Progress quiet(Progress::Mode::kQuiet);
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, &quiet);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("sha256 mismatch"), std::string::npos) << r.message();
  const std::string repo = cache + "/models--test--tiny-GGUF";
  int snapshot_entries = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(repo + "/snapshots", ec);
       !ec && it != fs::end(it); it.increment(ec)) {
    if (!it->is_directory()) ++snapshot_entries;
  }
  EXPECT_EQ(snapshot_entries, 0);
  EXPECT_TRUE(fs::is_empty(repo + "/blobs"));  // no blob, no partial file kept
}

TEST(HubPull, ServerErrorsThenSuccess) {
  auto hub = FixtureHub::start(q4_repo("e500"), {"--fail500", kQ4 + "=3", "--fail500", "api=2"});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("e500-cache");
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
  int errors = 0;
  for (const auto& l : hub->log_lines()) errors += l.find(" 500 ") != std::string::npos;
  EXPECT_EQ(errors, 5);
}

TEST(HubPull, PersistentServerErrorsGiveUp) {
  auto hub = FixtureHub::start(q4_repo("e500x"), {"--fail500", kQ4 + "=1000"});
  ASSERT_TRUE(hub);
  PullOptions opt;
  opt.retry.base_delay_ms = 10;
  auto r = pull(env_for(*hub, test::fresh_dir("e500x-cache")), spec("test/tiny-GGUF:Q4_0"), opt,
                nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("HTTP 500"), std::string::npos) << r.message();
}

TEST(HubPull, SlowServerWorks) {
  const std::string root = test::fresh_dir("slow-root");
  test::make_repo(root, "test/slow",
                  {{"tokenizer.model", golden("llama3-tiny/tokenizer.model")},
                   {"config.json", golden("llama3-tiny/config.json")}});
  // ~500 KB at 300 KB/s: well over a second of trickling bytes.
  auto hub = FixtureHub::start(root, {"--slow", "300000"});
  ASSERT_TRUE(hub);
  PullOptions opt;
  opt.include = {"tokenizer.model", "config.json"};
  auto r = pull(env_for(*hub, test::fresh_dir("slow-cache")), spec("test/slow"), opt, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(
      same_bytes(r->snapshot_dir + "/tokenizer.model", golden("llama3-tiny/tokenizer.model")));
  EXPECT_TRUE(same_bytes(r->snapshot_dir + "/config.json", golden("llama3-tiny/config.json")));
}

TEST(HubPull, GatedRepoNeedsToken) {
  auto hub = FixtureHub::start(q4_repo("gated"), {"--gated", "test/tiny-GGUF=hf_secret"});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("gated-cache");
  HubEnv env = env_for(*hub, cache);
  auto r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("401"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("HF_TOKEN"), std::string::npos) << r.message();
  env.token = "hf_wrong";
  env.token_source = "HF_TOKEN";
  r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("rejected"), std::string::npos) << r.message();
  env.token = "hf_secret";
  r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
}

TEST(HubPull, NotFoundErrors) {
  auto hub = FixtureHub::start(q4_repo("nf"));
  ASSERT_TRUE(hub);
  HubEnv env = env_for(*hub, test::fresh_dir("nf-cache"));
  auto no_repo = pull(env, spec("test/nothing"), {}, nullptr);
  ASSERT_FALSE(no_repo.is_ok());
  EXPECT_NE(no_repo.message().find("repository not found"), std::string::npos) << no_repo.message();
  PullOptions rev;
  rev.revision = "v9";
  auto no_rev = pull(env, spec("test/tiny-GGUF:Q4_0"), rev, nullptr);
  ASSERT_FALSE(no_rev.is_ok());
  EXPECT_NE(no_rev.message().find("revision not found"), std::string::npos) << no_rev.message();
  auto no_quant = pull(env, spec("test/tiny-GGUF:Q5_K_M"), {}, nullptr);
  ASSERT_FALSE(no_quant.is_ok());
  EXPECT_NE(no_quant.message().find("Q4_0"), std::string::npos) << no_quant.message();
  EXPECT_NE(no_quant.message().find("BF16"), std::string::npos) << no_quant.message();
}

TEST(HubPull, TwoProcessesOneBlob) {
  // Slow enough that the two downloads overlap; the lock makes the second wait and reuse.
  auto hub = FixtureHub::start(q4_repo("two"), {"--slow", "8000000"});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("two-cache");
  const HubEnv env = env_for(*hub, cache);
  pid_t kids[2];
  for (pid_t& kid : kids) {
    kid = fork();
    if (kid == 0) {
      auto r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
      _exit(r.is_ok() && same_bytes(r->model_path, q4_src()) ? 0 : 1);
    }
  }
  for (pid_t kid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(kid, &status, 0), kid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const std::string repo = cache + "/models--test--tiny-GGUF";
  std::vector<std::string> blobs;
  for (auto& e : fs::directory_iterator(repo + "/blobs")) blobs.push_back(e.path().filename());
  ASSERT_EQ(blobs.size(), 1u);
  EXPECT_EQ(blobs[0], sha256_hex(test::read_file(q4_src())));
  EXPECT_TRUE(same_bytes(repo + "/blobs/" + blobs[0], q4_src()));
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);  // the bytes crossed the wire once
}

TEST(HubPull, ResumesPartialLeftByDeadProcess) {
  auto hub = FixtureHub::start(q4_repo("resume"));
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("resume-cache");
  const std::string sha = sha256_hex(test::read_file(q4_src()));
  const std::string blobs = cache + "/models--test--tiny-GGUF/blobs";
  fs::create_directories(blobs);
  const std::string all = test::read_file(q4_src());
  test::write_file(blobs + "/" + sha + ".99999.incomplete", all.substr(0, 1000000));
  auto r = pull(env_for(*hub, cache), spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
  bool resumed = false;
  for (const auto& l : hub->log_lines()) resumed |= l.find("bytes=1000000-") != std::string::npos;
  EXPECT_TRUE(resumed);
  EXPECT_EQ(leftover_partials(cache + "/models--test--tiny-GGUF"), 0);
}

TEST(HubPull, SplitGgufFetchedWhole) {
  const std::string all = test::read_file(q4_src());
  const std::string parts = test::fresh_dir("split-src");
  const size_t half = all.size() / 2;
  test::write_file(parts + "/p1", all.substr(0, half));
  test::write_file(parts + "/p2", all.substr(half));
  const std::string root = test::fresh_dir("split-root");
  test::make_repo(root, "test/split-GGUF",
                  {{"Q4_0/tiny-Q4_0-00001-of-00002.gguf", parts + "/p1"},
                   {"Q4_0/tiny-Q4_0-00002-of-00002.gguf", parts + "/p2"},
                   {"tiny-Q8_0.gguf", golden("llama2-tiny/llama2-tiny-q8_0.gguf")}});
  auto hub = FixtureHub::start(root);
  ASSERT_TRUE(hub);
  auto r = pull(env_for(*hub, test::fresh_dir("split-cache")), spec("test/split-GGUF:Q4_0"), {},
                nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->files.size(), 2u);
  EXPECT_EQ(r->model_path, r->snapshot_dir + "/Q4_0/tiny-Q4_0-00001-of-00002.gguf");
  EXPECT_EQ(test::read_file(r->model_path) +
                test::read_file(r->snapshot_dir + "/Q4_0/tiny-Q4_0-00002-of-00002.gguf"),
            all);
  // Nested snapshot paths link back with one more "../" per folder.
  EXPECT_EQ(fs::read_symlink(r->model_path).string().rfind("../../../blobs/", 0), 0u);
}

// What huggingface_hub's cache scan and hf_hub_download(local_files_only=True) rely on.
TEST(HubPull, CacheLayoutReadableByHuggingfaceHub) {
  const std::string root = test::fresh_dir("layout-root");
  const std::string src = golden("llama2-tiny");
  test::make_repo(root, "test/tiny-llama",
                  {{"config.json", src + "/config.json"},
                   {"model.safetensors", src + "/model.safetensors"},
                   {"tokenizer.model", src + "/tokenizer.model"},
                   {"tokenizer_config.json", src + "/tokenizer_config.json"},
                   {"golden.json", src + "/golden.json"}});
  const std::string commit = "1111111111222222222233333333334444444444";
  auto hub = FixtureHub::start(root, {"--repo-commit", "test/tiny-llama=" + commit});
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("layout-cache");
  auto r = pull(env_for(*hub, cache), spec("test/tiny-llama"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  const std::string repo = cache + "/models--test--tiny-llama";
  EXPECT_EQ(r->model_path, repo + "/snapshots/" + commit);
  EXPECT_EQ(r->files, (std::vector<std::string>{"config.json", "model.safetensors",
                                                "tokenizer.model", "tokenizer_config.json"}));
  // Top level: exactly blobs, refs, snapshots.
  std::vector<std::string> top;
  for (auto& e : fs::directory_iterator(repo)) top.push_back(e.path().filename());
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<std::string>{"blobs", "refs", "snapshots"}));
  // refs/main is the bare commit, no newline.
  EXPECT_EQ(test::read_file(repo + "/refs/main"), commit);
  for (const auto& f : r->files) {
    const fs::path link = repo + "/snapshots/" + commit + "/" + f;
    ASSERT_TRUE(fs::is_symlink(link)) << f;
    const fs::path target = fs::read_symlink(link);
    EXPECT_TRUE(target.is_relative()) << target;
    EXPECT_EQ(target.parent_path(), fs::path("../../blobs")) << target;
    const std::string bytes = test::read_file(src + "/" + f);
    // LFS files are named by their sha256, small files by their git blob sha1 (the Hub's ETags).
    const std::string blob = target.filename();
    if (bytes.size() >= 64 * 1024) {
      EXPECT_EQ(blob, sha256_hex(bytes)) << f;
    } else {
      EXPECT_EQ(blob.size(), 40u) << f;
      EXPECT_EQ(git_blob_sha1_file(src + "/" + f).value(), blob) << f;
    }
    EXPECT_EQ(fs::canonical(link), fs::canonical(repo + "/blobs/" + blob));
    EXPECT_EQ(test::read_file(link), bytes) << f;
  }
  // The cache alone answers now: offline, pinned commit, and an unreachable endpoint.
  hub->stop();
  HubEnv offline = env_for(*hub, cache);
  offline.offline = true;
  auto o = pull(offline, spec("test/tiny-llama"), {}, nullptr);
  ASSERT_TRUE(o.is_ok()) << o.message();
  EXPECT_TRUE(o->offline);
  EXPECT_EQ(o->model_path, r->model_path);
  PullOptions pinned;
  pinned.revision = commit;
  auto p = pull(env_for(*hub, cache), spec("test/tiny-llama"), pinned, nullptr);
  ASSERT_TRUE(p.is_ok()) << p.message();
  auto down = pull(env_for(*hub, cache), spec("test/tiny-llama"), {}, nullptr);  // server stopped
  ASSERT_TRUE(down.is_ok()) << down.message();
  EXPECT_EQ(down->model_path, r->model_path);
}

TEST(HubPull, WriteFailureIsACleanErrorAndResumes) {
  auto hub = FixtureHub::start(q4_repo("wfail"));
  ASSERT_TRUE(hub);
  const std::string cache = test::fresh_dir("wfail-cache");
  const HubEnv env = env_for(*hub, cache);
  pid_t kid = fork();
  if (kid == 0) {
    // A 1 MiB file size limit makes the blob write fail part-way, like a disk filling up.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1 << 20, 1 << 20};
    setrlimit(RLIMIT_FSIZE, &lim);
    auto r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
    _exit(!r.is_ok() && r.message().find("write failed") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(kid, &status, 0), kid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string repo = cache + "/models--test--tiny-GGUF";
  EXPECT_EQ(leftover_partials(repo), 1);  // the partial file stays for the next pull
  EXPECT_TRUE(test::read_file(repo + "/refs/main").size() == 40);
  auto r = pull(env, spec("test/tiny-GGUF:Q4_0"), {}, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(same_bytes(r->model_path, q4_src()));
  bool resumed = false;
  for (const auto& l : hub->log_lines()) resumed |= l.find("bytes=1048576-") != std::string::npos;
  EXPECT_TRUE(resumed);
}

TEST(HubPull, OfflineAndUnreachableErrors) {
  HubEnv env;
  env.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  env.cache_dir = test::fresh_dir("unreach-cache");
  auto r = pull(env, spec("test/absent"), {}, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("cannot reach"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("HF_HUB_OFFLINE"), std::string::npos) << r.message();
  env.offline = true;
  r = pull(env, spec("test/absent:Q4_0"), {}, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("not in the cache"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("hearth pull test/absent:Q4_0"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hearth::hub
