// Aggregate generation throughput of `hearth serve` at 1, 4 and 16 concurrent clients (numbers
// for docs/performance.md). Usage: HEARTH_BIN=build/apps/cli/hearth HEARTH_SHARED=../shared \
//   node tests/e2e/server/throughput.mjs [seconds-per-level] [model]. Not a test: it asserts nothing.
import { startServer, MODEL } from "./helpers.mjs";

const seconds = Number(process.argv[2] || 10);
const model = process.argv[3] || MODEL;
const levels = [1, 4, 16];
const srv = await startServer(["--parallel", "16", "--ctx-size", "512"], { model });
try {
  console.log(`model ${model}, ${seconds} s per level, max_tokens 64, ignore_eos, greedy`);
  for (const clients of levels) {
    let tokens = 0, requests = 0;
    const until = Date.now() + seconds * 1000;
    const t0 = Date.now();
    await Promise.all(Array.from({ length: clients }, async (_, i) => {
      while (Date.now() < until) {
        const r = await fetch(`${srv.base}/v1/completions`, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: `And the king said ${i}`, max_tokens: 64, ignore_eos: true,
                                 temperature: 0, stream: true, stream_options: { include_usage: true } }),
        });
        const text = await r.text();
        const usage = text.split("\n\n").map((e) => e.slice(6)).filter((d) => d.includes('"usage":{'));
        tokens += JSON.parse(usage.at(-1)).usage.completion_tokens;
        requests++;
      }
    }));
    const elapsed = (Date.now() - t0) / 1000;
    console.log(`${String(clients).padStart(2)} clients: ${(tokens / elapsed).toFixed(1)} tok/s aggregate ` +
                `(${requests} requests, ${tokens} tokens, ${elapsed.toFixed(1)} s)`);
  }
} finally {
  await srv.stop();
}
