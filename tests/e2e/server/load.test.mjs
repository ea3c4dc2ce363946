// Bounded loopback load test: 32 concurrent streaming clients for HEARTH_LOAD_TEST_SECONDS
// (default 20 s in CI; the 2 minutes with HEARTH_LOAD_TEST_SECONDS=120), expecting
// 0 failed requests and RSS growth <= 32 MiB between warm-up and the end of the run.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer, health, waitFor } from "./helpers.mjs";

const SECONDS = Number(process.env.HEARTH_LOAD_TEST_SECONDS || 20);
const CLIENTS = 32;

test(`${CLIENTS} concurrent streaming clients for ${SECONDS} s`, { timeout: (SECONDS + 120) * 1000 }, async () => {
  const srv = await startServer(["--parallel", "8", "--max-queue", "64", "--ctx-size", "512", "-t", "2"]);
  try {
    const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0, timeout: 120000 });
    const prompts = ["And the king said", "In the beginning God", "Blessed are the", "And Moses spake unto"];
    let ok = 0, failed = 0, tokens = 0;
    const errors = [];
    async function one(i, round) {
      const chat = (i + round) % 2 === 0;
      const common = { model: "kjv", max_tokens: 16 + ((i * 7 + round) % 48), temperature: 0.8, seed: i * 1000 + round,
                       stream: true, stream_options: { include_usage: true } };
      const stream = chat
        ? await client.chat.completions.create({ ...common, messages: [{ role: "user", content: prompts[i % 4] }] })
        : await client.completions.create({ ...common, prompt: prompts[(i + round) % 4] });
      let usage = null;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      if (!usage || usage.completion_tokens < 1) throw new Error("stream ended without usage");
      tokens += usage.completion_tokens;
    }
    async function worker(i, until) {
      for (let round = 0; Date.now() < until; round++) {
        try {
          await one(i, round);
          ok++;
        } catch (e) {
          failed++;
          if (errors.length < 5) errors.push(String(e));
        }
      }
    }
    // Warm-up: every slot, the HTTP threads and the allocator reach their steady state.
    await Promise.all(Array.from({ length: CLIENTS }, (_, i) => worker(i, Date.now() + 3000)));
    const rss0 = srv.rssKiB();
    ok = 0; tokens = 0;
    const t0 = Date.now();
    await Promise.all(Array.from({ length: CLIENTS }, (_, i) => worker(i, t0 + SECONDS * 1000)));
    const elapsed = (Date.now() - t0) / 1000;
    assert.ok(await waitFor(async () => (await health(srv.base)).slots_busy === 0, 5000));
    const rss1 = srv.rssKiB();
    console.log(`load: ${ok} requests, ${failed} failed, ${tokens} tokens in ${elapsed.toFixed(1)} s ` +
                `(${(tokens / elapsed).toFixed(1)} tok/s aggregate); RSS ${(rss0 / 1024).toFixed(1)} -> ` +
                `${(rss1 / 1024).toFixed(1)} MiB`);
    assert.equal(failed, 0, errors.join("\n"));
    assert.ok(ok >= CLIENTS, `only ${ok} requests completed`);
    assert.ok(rss1 - rss0 <= 32 * 1024, `RSS grew by ${((rss1 - rss0) / 1024).toFixed(1)} MiB`);
  } finally {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.stderr());
  }
});
