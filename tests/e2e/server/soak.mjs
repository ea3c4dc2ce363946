// Soak of `hearth serve` under a hostile mix (issue 27): streaming clients that sometimes hang
// up mid-answer, slowloris sockets reopened as the server closes them, and malformed requests,
// all at once. Pass: no well-formed request failed, the server never exited, RSS grew at most
// 32 MiB after warm-up, and every slot is free at the end.
// Usage: HEARTH_BIN=build/apps/cli/hearth HEARTH_SHARED=../shared node tests/e2e/server/soak.mjs
//          [--seconds 600] [--clients 32] [--slowloris 50]
// soak.test.mjs runs it short through runSoak().
import net from "node:net";
import { startServer, health, waitFor } from "./helpers.mjs";
import { rawExchange, request, jsonPost } from "./raw-http.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Malformed requests and the statuses they must get.
const MALFORMED = [
  [request("GET", "/%ff"), 404],
  [request("GET", "/v1/models", { host: "127.0.0.1.evil.com" }), 403],
  [jsonPost("/v1/completions", { prompt: "x" }, { Origin: "http://evil.example" }), 403],
  [request("POST", "/v1/chat/completions", { headers: { "Content-Type": "application/json" }, body: "[".repeat(100000) }), 400],
  [request("POST", "/v1/completions", { headers: { "Content-Type": "application/json" }, body: "{\"prompt\": " }), 400],
  ["POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400],
  [jsonPost("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], tools: [{ type: "function" }] }), 400],
  ["\x00\x01\x02 nonsense\r\n\r\n", 400],
];

export async function runSoak({ seconds = 600, clients = 32, slowloris = 50, log = console.log } = {}) {
  const srv = await startServer(["--parallel", "8", "--max-queue", "64", "--ctx-size", "512", "-t", "2"]);
  const stats = { ok: 0, aborted: 0, failed: 0, malformed: 0, malformedWrong: 0, slowlorisOpened: 0, errors: [] };
  let stop = false;
  const fail = (what) => {
    stats.failed++;
    if (stats.errors.length < 10) stats.errors.push(what);
  };
  const prompts = ["And the king said", "In the beginning God", "Blessed are the", "And Moses spake unto"];

  // A streaming client: chat or completion; one in four hangs up after a random number of events.
  async function streamer(i) {
    for (let round = 0; !stop; round++) {
      const chat = (i + round) % 2 === 0;
      const hangUpAfter = Math.random() < 0.25 ? 1 + Math.floor(Math.random() * 20) : Infinity;
      const controller = new AbortController();
      const body = { max_tokens: 8 + ((i * 7 + round) % 40), temperature: 0.8, seed: i * 1000 + round,
                     stream: true, stream_options: { include_usage: true } };
      if (chat) body.messages = [{ role: "user", content: prompts[i % 4] }];
      else body.prompt = prompts[(i + round) % 4];
      try {
        const r = await fetch(`${srv.base}/v1/${chat ? "chat/completions" : "completions"}`, {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
          signal: controller.signal });
        if (r.status !== 200) { fail(`status ${r.status}: ${await r.text()}`); continue; }
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let text = "", events = 0;
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          text += dec.decode(value, { stream: true });
          events = (text.match(/\n\n/g) || []).length;
          if (events >= hangUpAfter) { controller.abort(); break; }
        }
        if (events >= hangUpAfter) { stats.aborted++; continue; }
        const data = text.split("\n\n").filter((e) => e.startsWith("data: "));
        if (data.at(-1) !== "data: [DONE]" || !/"usage":\{"completion_tokens":\d+/.test(data.at(-2) || ""))
          fail(`incomplete stream: ${text.slice(-200)}`);
        else stats.ok++;
      } catch (e) {
        if (controller.signal.aborted) stats.aborted++;
        else fail(String(e));
      }
    }
  }

  // A slowloris socket: a header byte a second; reopened whenever the server closes it.
  function slow() {
    if (stop) return;
    stats.slowlorisOpened++;
    const s = net.connect(srv.port, "127.0.0.1");
    const head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
    let k = 0;
    const timer = setInterval(() => { if (k < head.length) s.write(head[k++]); }, 1000);
    s.on("error", () => {});
    s.on("close", () => { clearInterval(timer); if (!stop) setTimeout(slow, 100); });
    sockets.push(s);
  }
  const sockets = [];

  async function malformed() {
    for (let i = 0; !stop; i++) {
      const [bytes, status] = MALFORMED[i % MALFORMED.length];
      const r = await rawExchange(srv.port, bytes, { timeoutMs: 10000 });
      stats.malformed++;
      if (r.final[0]?.status !== status) {
        stats.malformedWrong++;
        if (stats.errors.length < 10) stats.errors.push(`malformed #${i % MALFORMED.length}: got ${r.final[0]?.status}`);
      }
      await sleep(50);
    }
  }

  let exitedEarly = false;
  srv.exited.then(() => { if (!stop) exitedEarly = true; });
  try {
    for (let i = 0; i < slowloris; i++) slow();
    const workers = [...Array.from({ length: clients }, (_, i) => streamer(i)), malformed()];
    // Warm-up: slots, allocator and connection tables reach their steady state first.
    const warm = Math.min(10, Math.max(3, seconds / 10));
    await sleep(warm * 1000);
    const rss0 = srv.rssKiB();
    const t0 = Date.now();
    let peak = rss0;
    while (Date.now() - t0 < seconds * 1000 && !exitedEarly) {
      await sleep(1000);
      if (!exitedEarly) peak = Math.max(peak, srv.rssKiB());
    }
    stop = true;
    for (const s of sockets) s.destroy();
    await Promise.all(workers);
    const freed = !exitedEarly && (await waitFor(async () => (await health(srv.base)).slots_busy === 0, 5000));
    const rss1 = exitedEarly ? 0 : srv.rssKiB();
    const summary = {
      seconds, clients, slowloris, ok: stats.ok, aborted: stats.aborted, failed: stats.failed,
      malformed: stats.malformed, malformed_wrong: stats.malformedWrong, slowloris_opened: stats.slowlorisOpened,
      crashed: exitedEarly, slots_free: freed, rss_mib: [rss0 / 1024, peak / 1024, rss1 / 1024].map((v) => Number(v.toFixed(1))),
      rss_growth_mib: Number(((rss1 - rss0) / 1024).toFixed(1)), errors: stats.errors,
    };
    log(`soak: ${JSON.stringify(summary)}`);
    if (!exitedEarly) log(`soak: at the end ${srv.memoryLine()}`);
    summary.pass = !exitedEarly && stats.failed === 0 && stats.malformedWrong === 0 && freed &&
                   rss1 - rss0 <= 32 * 1024 && stats.ok > 0;
    return summary;
  } finally {
    stop = true;
    for (const s of sockets) s.destroy();
    await srv.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name, dflt) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : dflt;
  };
  const r = await runSoak({ seconds: arg("seconds", 600), clients: arg("clients", 32), slowloris: arg("slowloris", 50) });
  process.exit(r.pass ? 0 : 1);
}
