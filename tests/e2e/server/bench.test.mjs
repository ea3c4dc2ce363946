// `hearth bench --serve` against a kjv-13m `hearth serve`: a short streaming load whose JSON report
// counts every request and token, with latencies that make sense, the prefix cache hit on the
// shared prefix; and a load the server refuses, reported as failures with exit status 1.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, run, HEARTH, SANITIZED } from "./helpers.mjs";

let srv;

before(async () => {
  srv = await startServer(["--parallel", "4", "--ctx-size", "512", "-t", "2"]);
});
after(async () => {
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, `server exit: ${JSON.stringify(r)} ${srv.stderr()}`);
  }
});

test("a short load: every request streams its tokens, the report adds them up", async () => {
  const requests = SANITIZED ? 4 : 12;
  const r = await run(HEARTH, ["bench", "--serve", srv.base, "--clients", "4", "--prompt-tokens", "48",
                               "--gen-tokens", "8", "--shared-prefix", "32", "--requests",
                               String(requests), "--json"], { timeoutMs: 120000 });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const report = JSON.parse(r.stdout);
  assert.equal(report.mode, "serve");
  assert.equal(report.requests, requests);
  assert.equal(report.failures, 0, JSON.stringify(report.errors));
  assert.equal(report.completion_tokens, requests * 8);
  assert.ok(report.gen_tok_s > 0);
  assert.ok(report.ttft_ms.p50 > 0 && report.ttft_ms.p99 >= report.ttft_ms.p50, JSON.stringify(report));
  assert.ok(report.itl_ms.p99 >= report.itl_ms.p50 && report.itl_ms.p50 >= 0);
  assert.ok(report.e2e_ms.p50 >= report.ttft_ms.p50);
  const metrics = await (await fetch(`${srv.base}/metrics`)).text();
  const hits = metrics.match(/^hearth_prefix_cache_hits_total\{source="(same_slot|copied)"\} (\d+)/gm)
    .map((line) => Number(line.split(" ")[1])).reduce((a, b) => a + b, 0);
  // The first four requests start together on an empty cache; the later ones find the prefix.
  assert.ok(hits >= requests - 4, metrics);
});

test("a load the server refuses is reported, and the exit status says so", async () => {
  const r = await run(HEARTH, ["bench", "--serve", srv.base, "--clients", "2", "--prompt-tokens", "16",
                               "--gen-tokens", "1000", "--requests", "2"]);
  assert.equal(r.code, 1, r.stderr + r.stdout);
  assert.match(r.stdout, /0 ok, 2 failed/);
  assert.match(r.stdout, /failed: HTTP 400/);
});

test("bad options name the flag", async () => {
  const r = await run(HEARTH, ["bench", "--serve", srv.base, "--prompt-tokens", "8", "--shared-prefix", "9"]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /--shared-prefix/);
});
