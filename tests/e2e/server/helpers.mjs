// Shared helpers for the `hearth serve` end-to-end tests: start a server on a free loopback
// port (port 0, read back from its start-up line), stop it by its own pid, read its RSS.
// Every wait is bounded; a missing model or binary fails the test instead of skipping it.
import { spawn, execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ollama } from "ollama";

export const HEARTH = process.env.HEARTH_BIN || "";
const SHARED = process.env.HEARTH_SHARED || process.env.HEARTH_SHARED_DEFAULT || "";
export const MODEL = `${SHARED}/goldens/kjv-13m/kjv-13m-q8_0.gguf`;
// Set by the asan-ubsan build's CTest: ASan's quarantine holds freed memory, so RSS bounds hold
// for the release binary only (the same tests still run there for crashes and wrong answers).
export const SANITIZED = process.env.HEARTH_SANITIZED === "1";

export function checkInputs() {
  assert.ok(HEARTH && existsSync(HEARTH), `hearth binary not found (HEARTH_BIN='${HEARTH}')`);
  assert.ok(existsSync(MODEL), `test model missing: ${MODEL} (set HEARTH_SHARED)`);
}

// Starts `hearth serve -m MODEL --port 0 ARGS`; resolves once it prints its address.
export async function startServer(args = [], { timeoutMs = 60000, model = MODEL } = {}) {
  checkInputs();
  const proc = spawn(HEARTH, ["serve", "-m", model, "--port", "0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  let stdout = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`hearth serve did not start within ${timeoutMs} ms: ${stderr}`));
    }, timeoutMs);
    proc.stdout.on("data", (d) => {
      stdout += d;
      const m = stdout.match(/listening on http:\/\/\S+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`hearth serve exited (${code ?? signal}) at start: ${stderr}`));
    });
  });
  const server = {
    proc,
    port,
    base: `http://127.0.0.1:${port}`,
    exited,
    stderr: () => stderr,
    rssKiB() {
      const status = readFileSync(`/proc/${proc.pid}/status`, "utf8");
      return Number(status.match(/VmRSS:\s+(\d+)/)[1]);
    },
    // "rss R MiB (anon A, file F, huge H)": for logs, so a growth says which kind of page it is.
    memoryLine() {
      const status = readFileSync(`/proc/${proc.pid}/status`, "utf8");
      const kib = (k) => Number(status.match(new RegExp(`${k}:\\s+(\\d+)`))?.[1] ?? 0);
      let huge = 0;
      try {
        huge = Number(readFileSync(`/proc/${proc.pid}/smaps_rollup`, "utf8").match(/AnonHugePages:\s+(\d+)/)?.[1] ?? 0);
      } catch {}
      const mib = (v) => (v / 1024).toFixed(1);
      return `rss ${mib(kib("VmRSS"))} MiB (anon ${mib(kib("RssAnon"))}, file ${mib(kib("RssFile"))}, huge ${mib(huge)})`;
    },
    // SIGTERM, then SIGKILL if it has not exited within `graceMs`. Resolves with the exit.
    async stop(graceMs = 15000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
  return server;
}

export async function getJson(url, init = {}) {
  const r = await fetch(url, init);
  const text = await r.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: r.status, headers: r.headers, body };
}

// init: more fetch options (e.g. a `signal` that bounds the request).
export function postJson(url, payload, headers = {}, init = {}) {
  return getJson(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof payload === "string" ? payload : JSON.stringify(payload),
    ...init,
  });
}

// Runs a program without a shell; resolves { code, stdout, stderr }.
export function run(file, args, { timeoutMs = 60000 } = {}) {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? -1) : 0, stdout, stderr });
    });
  });
}

// Polls `fn` every `everyMs` until it returns truthy or `withinMs` passes; returns its value.
export async function waitFor(fn, withinMs, everyMs = 20) {
  const end = Date.now() + withinMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function health(base) {
  return (await getJson(`${base}/health`)).body;
}

// Asserts the OpenAI error shape.
export function assertErrorShape(body, type) {
  assert.equal(typeof body, "object", `error body is not JSON: ${body}`);
  assert.equal(typeof body.error, "object");
  assert.equal(typeof body.error.message, "string");
  assert.ok(body.error.message.length > 0);
  if (type) assert.equal(body.error.type, type);
  assert.ok("param" in body.error && "code" in body.error);
}

// A server for a test file's tests with the official `openai` and `ollama` clients on it.
export async function startWithClients(args) {
  const srv = await startServer(args);
  const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  return { srv, client, ollama: new Ollama({ host: srv.base }) };
}

// Stops a server started for a file's tests; it must exit cleanly.
export async function stopCleanly(srv) {
  if (!srv) return;
  const r = await srv.stop();
  assert.equal(r.code, 0, `server exit: ${JSON.stringify(r)} ${srv.stderr()}`);
}
