// `hearth bench --serve` internals: percentiles and the summary of request traces, the prompts'
// shared prefix, option errors naming the flag, and the SSE client against a local stub server
// that streams canned answers (timed chunks, usage, errors, short answers, HTTP errors).
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "serve-load.h"
#include "serve-stats.h"

namespace hearth::bench {
namespace {

TEST(ServeStats, PercentilesInterpolateBetweenRanks) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  EXPECT_EQ(percentile({7}, 99), 7.0);
  // numpy.percentile([1, 2, 3, 4], [0, 50, 99, 100]) -> 1, 2.5, 3.97, 4
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 101; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(hundred, 99), 100.0);
  EXPECT_DOUBLE_EQ(percentile(hundred, 50), 51.0);
  const Latency l = Latency::of(v);
  EXPECT_DOUBLE_EQ(l.mean, 2.5);
  EXPECT_DOUBLE_EQ(l.p50, 2.5);
  EXPECT_DOUBLE_EQ(l.max, 4.0);
}

TEST(ServeStats, SummaryCountsOnlySuccessfulRequestsTokens) {
  std::vector<ServeRequestTrace> t(3);
  t[0] = {true, "", 0.0, 1.0, 100, {10, 20}, 3};
  t[1] = {true, "", 0.5, 2.0, 300, {30}, 2};
  t[2] = {false, "HTTP 503: busy", 0.2, 0.3, 0, {}, 0};
  const ServeSummary s = summarize(t);
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.failures, 1);
  EXPECT_EQ(s.completion_tokens, 5);
  EXPECT_DOUBLE_EQ(s.wall_s, 2.0);
  EXPECT_DOUBLE_EQ(s.gen_tok_s, 2.5);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.ttft.p50, 200.0);
  EXPECT_DOUBLE_EQ(s.itl.p50, 20.0);  // the gaps of every request pooled
  EXPECT_DOUBLE_EQ(s.itl.mean, 20.0);
  EXPECT_DOUBLE_EQ(s.itl.max, 30.0);  // one long gap among the pooled ones
  EXPECT_DOUBLE_EQ(s.e2e.p50, 1250.0);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0], "HTTP 503: busy");
  const auto j = nlohmann::json::parse(render_serve_json(ServeLoadOptions{}, s));
  EXPECT_EQ(j["failures"], 1);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["p50"].get<double>(), 200.0);
  EXPECT_EQ(j["ttft_each_ms"], nlohmann::json::parse("[100.0, 300.0, -1.0]"));  // request order
  EXPECT_DOUBLE_EQ(j["itl_ms"]["max"].get<double>(), 30.0);
  const std::string md = render_serve_markdown(ServeLoadOptions{}, s);
  EXPECT_NE(md.find("2.5 tok/s"), std::string::npos) << md;
  EXPECT_NE(md.find("failed: HTTP 503"), std::string::npos) << md;
  EXPECT_EQ(summarize({}).gen_tok_s, 0.0);
}

TEST(ServeLoad, PromptsShareExactlyThePrefix) {
  ServeLoadOptions o;
  o.prompt_tokens = 40;
  o.shared_prefix = 25;
  std::set<std::vector<int32_t>> distinct;
  const auto first = serve_prompt(o, 0);
  for (int i = 0; i < 20; ++i) {
    const auto p = serve_prompt(o, i);
    ASSERT_EQ(p.size(), 40u);
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 25, first.begin())) << i;
    for (int32_t id : p) EXPECT_TRUE(id >= 300 && id < 1000) << id;
    EXPECT_EQ(p, serve_prompt(o, i)) << "prompts repeat";
    distinct.insert(p);
  }
  EXPECT_EQ(distinct.size(), 20u);
  o.shared_prefix = 0;
  EXPECT_NE(serve_prompt(o, 0)[0], serve_prompt(o, 1)[0]);
}

TEST(ServeLoad, BadOptionsNameTheFlag) {
  ServeLoadOptions ok;
  ok.url = "http://127.0.0.1:1";
  EXPECT_TRUE(check_serve_options(ok).is_ok());
  auto expect_flag = [&](ServeLoadOptions o, const char* flag) {
    const Status s = check_serve_options(o);
    ASSERT_FALSE(s.is_ok()) << flag;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
  };
  ServeLoadOptions o = ok;
  o.url = "127.0.0.1:8080";
  expect_flag(o, "--serve");
  o = ok;
  o.clients = 0;
  expect_flag(o, "--clients");
  o = ok;
  o.gen_tokens = 0;
  expect_flag(o, "--gen-tokens");
  o = ok;
  o.prompt_tokens = 0;
  expect_flag(o, "--prompt-tokens");
  o = ok;
  o.shared_prefix = o.prompt_tokens + 1;
  expect_flag(o, "--shared-prefix");
  o = ok;
  o.requests = -1;
  expect_flag(o, "--requests");
}

// A stand-in server: /v1/completions streams `tokens` one-token chunks 5 ms apart, or misbehaves
// as the request's max_tokens asks (1: an error event, 2: a short answer, 3: HTTP 500).
class StubServer {
 public:
  StubServer() {
    server_.Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      const auto j = nlohmann::json::parse(req.body);
      const int n = j["max_tokens"];
      if (n == 3) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom"}})", "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [n](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) { sink.write(s.data(), s.size()); };
        send(": keep-alive\n\n");
        if (n == 1) {
          send("data: {\"error\":{\"message\":\"server_shutting_down\"}}\n\ndata: [DONE]\n\n");
          sink.done();
          return true;
        }
        const int emitted = n == 2 ? 1 : n;
        for (int i = 0; i < emitted; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          send("data: {\"choices\":[{\"index\":0,\"text\":\"w\",\"finish_reason\":null}]}\n\n");
        }
        send("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n");
        send("data: {\"choices\":[],\"usage\":{\"completion_tokens\":" + std::to_string(emitted) +
             "}}\n\ndata: [DONE]\n\n");
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // bind_to_any_port() already listens: connections wait in the backlog until accept runs.
  }
  ~StubServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(ServeLoad, TimesStreamedChunksAndReportsFailures) {
  StubServer stub;
  ServeLoadOptions o;
  o.url = stub.url();
  o.clients = 3;
  o.prompt_tokens = 8;
  o.gen_tokens = 6;
  o.requests = 6;
  auto traces = run_serve_load(o);
  ASSERT_TRUE(traces.is_ok()) << traces.message();
  ASSERT_EQ(traces->size(), 6u);
  for (const auto& t : *traces) {
    ASSERT_TRUE(t.ok) << t.error;
    EXPECT_EQ(t.completion_tokens, 6);
    EXPECT_EQ(t.itl_ms.size(), 5u);
    EXPECT_GT(t.ttft_ms, 0.0);
    for (double gap : t.itl_ms) EXPECT_GE(gap, 0.0);
    EXPECT_GE(t.end_s, t.start_s);
  }
  const ServeSummary s = summarize(*traces);
  EXPECT_EQ(s.failures, 0);
  EXPECT_EQ(s.completion_tokens, 36);
  EXPECT_GT(s.gen_tok_s, 0.0);
  EXPECT_GE(s.itl.p99, s.itl.p50);

  for (int mode : {1, 2, 3}) {
    o.gen_tokens = mode;
    o.requests = 2;
    auto failed = run_serve_load(o);
    ASSERT_TRUE(failed.is_ok());
    for (const auto& t : *failed) {
      EXPECT_FALSE(t.ok) << mode;
      const char* expected = mode == 1   ? "error event"
                             : mode == 2 ? "generated 1 tokens"
                                         : "HTTP 500";
      EXPECT_NE(t.error.find(expected), std::string::npos) << t.error;
    }
  }
  // Nobody listening: a transport failure per request, not an exception.
  o.url = "http://127.0.0.1:1";
  o.gen_tokens = 4;
  auto refused = run_serve_load(o);
  ASSERT_TRUE(refused.is_ok());
  for (const auto& t : *refused) EXPECT_NE(t.error.find("no answer"), std::string::npos) << t.error;
}

}  // namespace
}  // namespace hearth::bench
