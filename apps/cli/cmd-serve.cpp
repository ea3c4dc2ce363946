// `hearth serve`: an OpenAI-compatible HTTP server (apps/server) over one loaded model, with
// continuous batching across --parallel slots. New flags map onto server::ServerOptions here.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "base/mapped-file.h"
#include "base/process-memory.h"
#include "command.h"
#include "common.h"
#include "runtime/chat/chat-template.h"
#include "server.h"

namespace hearth::cli {
namespace {

struct ServeArgs {
  RuntimeArgs rt;
  SamplingParams sampling;
  server::ServerOptions opt;
  std::string alias, template_file, template_name;
  int drain_seconds = 30;
  size_t max_body_kib = 8192;
  int64_t step_prompt_tokens = -1;  // -1: by where the layers run (serve_step_prompt_tokens)
  std::string step_log;             // --step-log: a JSON line per batched step
  bool no_warmup = false;
};

// --step-log FILE: each batched step as a JSON line, written as it ends (line-buffered, so a
// load's steps can be read while the server runs).
void open_step_log(const std::string& path, SchedulerOptions* s) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) fail("--step-log: cannot write " + path);
  std::setvbuf(f, nullptr, _IOLBF, 1 << 16);
  s->on_step = [f](const StepRecord& r) {
    std::fprintf(f,
                 "{\"t\":%.6f,\"segments\":%d,\"tokens\":%lld,\"prompt_tokens\":%lld,"
                 "\"sampled\":%lld,\"device_picks\":%lld,\"passes\":%lld,\"prepare_ms\":%.3f,"
                 "\"forward_ms\":%.3f,\"step_ms\":%.3f}\n",
                 r.start_seconds, r.segments, (long long)r.tokens, (long long)r.prompt_tokens,
                 (long long)r.sampled, (long long)r.device_picks, (long long)r.passes, r.prepare_ms,
                 r.forward_ms, r.step_ms);
  };
}

bool layers_end_on_gpu(const Engine& engine) {
  const auto backends = engine.model().layer_backends();
  return !backends.empty() && backends.back()->name() != "cpu";
}

// --step-prompt-tokens' default. On the CPU a prompt chunk's compute is what running streams
// wait for: 128 keeps their inter-token gap short. On a GPU a 512-token pass costs a few decode
// steps, and a burst of new requests is best computed in passes of prompts alone, the running
// streams waiting once for up to sixteen of them, not a slow token per pass (H100, 7B Q4_0,
// clients of 100-token prompts against 512: inter-token p99 at 32 clients 4.8-4.9 ms against
// 17, one client's 2.7-2.8; at 64 clients 7.8-8.0 against 32-36; 1-2% fewer tok/s).
int64_t serve_step_prompt_tokens(const ServeArgs& a, const Engine& engine) {
  if (a.step_prompt_tokens >= 0) return a.step_prompt_tokens;
  return layers_end_on_gpu(engine) ? 8192 : 128;
}

// The warm-up pass before the first request (SchedulerOptions::warm_up_tokens): on a GPU, a step
// as large as the server runs; the CPU has no first-pass setup worth a prefill at start.
int64_t serve_warm_up_tokens(const ServeArgs& a, const Engine& engine) {
  if (a.no_warmup || !layers_end_on_gpu(engine)) return 0;
  return a.opt.scheduler.step_prompt_tokens > 0 ? a.opt.scheduler.step_prompt_tokens
                                                : a.opt.scheduler.batch_tokens;
}

// The chat template: --chat-template-file, --template-name, the model's own, or a built-in
// guessed from the model's name (said on stderr, since a wrong guess garbles answers).
void pick_template(const ServeArgs& a, const Engine& engine, server::ApiConfig* api) {
  std::string label;
  if (!a.template_file.empty()) {
    api->chat_template = check(read_text_file(a.template_file));
    label = a.template_file;
  } else if (!a.template_name.empty()) {
    auto b = builtin_chat_template(a.template_name);
    if (!b) fail("--template-name: unknown template '" + a.template_name + "'");
    api->chat_template = std::string(*b);
    label = "built-in " + a.template_name;
  } else if (!engine.chat_template().empty()) {
    api->chat_template = engine.chat_template();
    label = "from the model";
  } else {
    const std::string name =
        guess_chat_template_name(engine.name(), engine.model().arch().gguf_name).value_or("llama2");
    api->chat_template = std::string(*builtin_chat_template(name));
    label = "built-in " + name + " (the model has none; choose with --template-name)";
  }
  const auto family = detect_chat_template_family(api->chat_template);
  if (family == "chatml") api->chat_stops = {"<|im_end|>", "<|im_start|>"};
  if (family == "llama3") api->chat_stops = {"<|eot_id|>", "<|start_header_id|>"};
  if (family == "gemma") api->chat_stops = {"<end_of_turn>", "<start_of_turn>"};
  if (family == "llama2" || family == "mistral") api->chat_stops = {"</s>", "[INST]"};
  std::fprintf(stderr, "hearth serve: chat template %s\n", label.c_str());
}

void serve(ServeArgs& a) {
  // Block the shutdown signals before any thread starts, so only the waiter below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  if (!server::is_loopback_host(a.opt.host) && a.opt.api_key.empty())
    fail("--host " + a.opt.host +
         " makes the server reachable from other machines; give --api-key KEY (or bind 127.0.0.1)");
  auto engine = load_engine_or_exit(a.rt, false, a.opt.scheduler.parallel);
  a.opt.scheduler.ctx_size = context_size(a.rt, *engine);
  a.opt.scheduler.kv_types = kv_cache_types(a.rt);
  a.opt.scheduler.step_prompt_tokens = serve_step_prompt_tokens(a, *engine);
  a.opt.scheduler.warm_up_tokens = serve_warm_up_tokens(a, *engine);
  if (!a.step_log.empty()) open_step_log(a.step_log, &a.opt.scheduler);
  a.opt.api.model_id = a.alias.empty() ? engine->name() : a.alias;
  a.opt.api.defaults = a.sampling;
  a.opt.max_body_bytes = a.max_body_kib * 1024;
  pick_template(a, *engine, &a.opt.api);

  server::Server srv(engine, a.opt);
  check(srv.start());
  const auto& s = a.opt.scheduler;
  const HParams& hp = engine->model().hparams();
  // K and V at their element types, every layer, every position of the pool: the most the
  // pool commits (sliding layers' rings, bounded by their window, come on top).
  const SchedulerStats pool = srv.scheduler_stats();
  const double kv_mib = double(KvCache::bytes_per_position(hp.kv_dim(), s.kv_types)) *
                        double(hp.n_layer) * double(pool.kv_pool_tokens) / (1024.0 * 1024.0);
  std::fprintf(stderr,
               "hearth serve: %d slots of up to %lld tokens sharing a KV pool of %lld tokens "
               "(%lld blocks of %lld; KV cache %s/%s, at most %.1f MiB, committed as used), "
               "queue %d\n",
               s.parallel, (long long)s.ctx_size, (long long)pool.kv_pool_tokens,
               (long long)pool.kv_blocks_total, (long long)pool.kv_block_tokens,
               kv_type_name(s.kv_types.k), kv_type_name(s.kv_types.v), kv_mib, s.max_queue);
  std::printf("hearth serve: listening on http://%s:%d (model %s)\n",
              a.opt.host.find(':') != std::string::npos ? ("[" + a.opt.host + "]").c_str()
                                                        : a.opt.host.c_str(),
              srv.port(), a.opt.api.model_id.c_str());
  std::fflush(stdout);

  const int drain_seconds = a.drain_seconds;
  std::thread waiter([&srv, signals, drain_seconds] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "hearth serve: %s received, finishing in-flight requests (up to %d s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", drain_seconds);
    srv.shutdown(std::chrono::seconds(drain_seconds));
  });
  const Status st = srv.serve();
  if (!st.is_ok()) {
    // Wake the waiter so it can exit; the process is leaving anyway.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    fail(st);
  }
  waiter.join();
  std::fprintf(stderr, "hearth serve: stopped\n");
}

void setup(CLI::App& root) {
  static ServeArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  a->rt.cuda.preload_kernels = true;  // (a server's first requests should not load kernels)
  add_runtime_options(cmd, &a->rt);
  add_sampling_options(cmd, &a->sampling);
  cmd->add_option("--host", a->opt.host, "address to bind (default 127.0.0.1)");
  cmd->add_option("--port", a->opt.port, "port (default 8080; 0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel,--np", a->opt.scheduler.parallel,
                  "requests decoded together, each with its own --ctx-size context (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--kv-pool-tokens", a->opt.scheduler.kv_pool_tokens,
                  "KV cache positions all slots share, committed as they are used (default "
                  "--parallel x --ctx-size); -c stays each sequence's limit")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--max-queue", a->opt.scheduler.max_queue,
                  "requests waiting for a slot before answering 503 (default 64)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--batch-tokens", a->opt.scheduler.batch_tokens,
                  "tokens per batched forward pass (default 512)")
      ->check(CLI::Range(1, 512));
  cmd->add_option("--step-prompt-tokens", a->step_prompt_tokens,
                  "prompt tokens computed between two tokens of a running request: long "
                  "prompts are prefilled in chunks of this size, so running streams pause for a "
                  "chunk, not the whole prompt; above --batch-tokens a chunk takes several "
                  "passes, prompts alone first, and the streams wait for them at once (default "
                  "128 with the layers on the CPU, 8192 on a GPU; 0 = --batch-tokens)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--no-warmup", a->no_warmup,
                "GPU: skip the pass run at start (a step as large as the server runs) that takes "
                "the device's first-pass setup off the first requests");
  cmd->add_option("--step-log", a->step_log,
                  "write each batched step (tokens, prompt tokens, forward and step ms) to FILE "
                  "as a JSON line");
  cmd->add_option("--api-key", a->opt.api_key,
                  "require 'Authorization: Bearer KEY' (needed when --host is not loopback)");
  cmd->add_option("--alias", a->alias, "model id reported by the API (default: the model's name)");
  cmd->add_option("--fallback", a->opt.fallback_url,
                  "remote OpenAI-compatible base URL (e.g. https://host/v1) for requests the local "
                  "model cannot take (queue full, context too long)");
  cmd->add_option("--fallback-key", a->opt.fallback_key, "API key for --fallback");
  cmd->add_option("--chat-template-file", a->template_file, "Jinja chat template file");
  cmd->add_option("--template-name", a->template_name,
                  "built-in chat template (llama2, llama3, chatml, mistral, gemma)");
  cmd->add_option("--max-body-kib", a->max_body_kib, "largest request body in KiB (default 8192)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--http-threads", a->opt.http_threads,
                  "threads of the HTTP event loop (default 4; idle and streaming connections "
                  "hold none)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--allowed-host", a->opt.allowed_hosts,
                  "a Host name the server answers to besides localhost, 127.0.0.1, [::1] and "
                  "--host (repeatable; others get 403)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--cors-origin", a->opt.cors_origins,
                  "an origin (https://app.example:3000, or *) whose pages may call the API, with "
                  "CORS and preflight (repeatable; other origins get 403)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--special-tokens-in-content", a->opt.api.special_tokens_in_content,
                "trusted clients only: special-token texts in chat messages (</s>, <|im_end|>) "
                "become control tokens instead of text");
  cmd->add_option("--drain-seconds", a->drain_seconds,
                  "on SIGTERM, how long in-flight requests may take to finish (default 30)")
      ->check(CLI::Range(0, 3600));
  cmd->callback([a] {
    if (a->rt.model.model.empty() && a->rt.model.repo_id.empty())
      fail("serve: give a model with -m MODEL");
    // A server lives for days under bursts of large, short-lived requests: keep the
    // allocator from holding their memory in one arena per thread that ever touched it.
    bound_allocator_retention(4);
    serve(*a);
  });
}

HEARTH_REGISTER_COMMAND(40, setup);

}  // namespace
}  // namespace hearth::cli
