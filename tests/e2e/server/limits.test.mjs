// Overload and lifecycle behaviour of `hearth serve`: a client that disconnects frees its slot
// within a second, a full queue answers 503 (with Retry-After) within 100 ms, and SIGTERM lets
// in-flight requests finish while refusing new ones.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, postJson, health, waitFor, assertErrorShape } from "./helpers.mjs";

// Opens a streaming completion and resolves once its first bytes arrived (the slot is busy).
async function openStream(base, maxTokens, controller) {
  const r = await fetch(`${base}/v1/completions`, {
    method: "POST", signal: controller?.signal, headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "And the king said", max_tokens: maxTokens, ignore_eos: true, stream: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  await reader.read();
  return reader;
}

test("a client that disconnects mid-stream frees its slot within 1 s", async () => {
  // 4000 tokens (~20 s of kjv-13m on 2 threads) so the stream cannot end on its own before the
  // health check, even when a loaded machine delays the first chunk or the check by seconds
  // (1000 tokens did, twice, under ctest -j2).
  const srv = await startServer(["--parallel", "1", "--ctx-size", "4096", "-t", "2"]);
  try {
    const controller = new AbortController();
    await openStream(srv.base, 4000, controller);
    assert.equal((await health(srv.base)).slots_busy, 1);
    const t0 = Date.now();
    controller.abort();
    const freed = await waitFor(async () => (await health(srv.base)).slots_busy === 0, 1000);
    assert.ok(freed, `slot still busy ${Date.now() - t0} ms after the disconnect`);
    const metrics = await (await fetch(`${srv.base}/metrics`)).text();
    assert.match(metrics, /hearth_requests_total\{outcome="cancelled"\} 1/);
    // The slot serves the next request.
    const r = await postJson(`${srv.base}/v1/completions`, { prompt: "And", max_tokens: 3 });
    assert.equal(r.status, 200);
  } finally {
    await srv.stop();
  }
});

test("a full queue answers 503 with Retry-After within 100 ms", async () => {
  const srv = await startServer(["--parallel", "1", "--max-queue", "1", "--ctx-size", "4096", "-t", "2"]);
  try {
    const controller = new AbortController();
    await openStream(srv.base, 4000, controller);  // takes the slot (for longer than this test)
    const queued = fetch(`${srv.base}/v1/completions`, {  // waits in the queue
      method: "POST", signal: controller.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "And", max_tokens: 1000, ignore_eos: true }),
    }).catch(() => null);
    assert.ok(await waitFor(async () => (await health(srv.base)).queue_depth === 1, 2000));
    const times = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const r = await postJson(`${srv.base}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }] });
      times.push(performance.now() - t0);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("retry-after"), "1");
      assertErrorShape(r.body, "server_error");
      assert.equal(r.body.error.code, "server_busy");
    }
    times.sort((a, b) => a - b);
    assert.ok(times[2] < 100, `503 took ${times.map((t) => t.toFixed(1)).join(", ")} ms`);
    controller.abort();
    await queued;
  } finally {
    await srv.stop();
  }
});

test("SIGTERM drains in-flight requests and refuses new ones", async () => {
  // A drain long enough for 2 x 900 tokens on a slow shared host (~60 tok/s seen): the test is
  // about finishing in-flight work during the drain, not about speed.
  const srv = await startServer(["--parallel", "2", "--ctx-size", "1024", "-t", "2",
                                 "--drain-seconds", "120"]);
  // 900 tokens each: both must still be running when the second one starts on a loaded machine.
  const inflight = postJson(`${srv.base}/v1/completions`, { prompt: "And the king said", max_tokens: 900, ignore_eos: true });
  const streamed = (async () => {
    const r = await fetch(`${srv.base}/v1/completions`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "And God said", max_tokens: 900, ignore_eos: true, stream: true }),
    });
    return r.text();
  })();
  assert.ok(await waitFor(async () => (await health(srv.base)).slots_busy === 2, 5000));
  srv.proc.kill("SIGTERM");
  const draining = await waitFor(async () => {
    try { return (await health(srv.base)).status === "draining"; } catch { return false; }
  }, 2000);
  assert.ok(draining);
  const refused = await postJson(`${srv.base}/v1/completions`, { prompt: "And", max_tokens: 2 }).catch(() => null);
  if (refused) assert.equal(refused.status, 503);  // or the listener is already closed
  const done = await inflight;
  assert.equal(done.status, 200);
  assert.equal(done.body.usage.completion_tokens, 900);
  const text = await streamed;
  assert.ok(text.trimEnd().endsWith("data: [DONE]"));
  assert.match(text, /"finish_reason":"length"/);
  const exit = await srv.exited;
  assert.equal(exit.code, 0, srv.stderr());
});
