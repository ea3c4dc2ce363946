// `hearth serve` through real clients: the official `openai` npm package and curl, on loopback,
// with the kjv-13m model. Covers chat/completions (streamed and not), embeddings, models,
// usage, stop, sampling fields, auth, error shapes, Host checks, limits and the fallback.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  startServer, postJson, getJson, run, assertErrorShape, HEARTH, MODEL,
} from "./helpers.mjs";

let srv;
let client;

before(async () => {
  srv = await startServer(["--parallel", "2", "--ctx-size", "512", "-t", "2"]);
  client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, `server exit: ${JSON.stringify(r)} ${srv.stderr()}`);
  }
});

test("models lists the loaded model", async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].object, "model");
  assert.ok(page.data[0].id.length > 0);
});

test("chat completion, not streamed", async () => {
  const r = await client.chat.completions.create({
    model: "kjv", messages: [{ role: "user", content: "Who was David?" }],
    max_tokens: 16, temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 16);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("chat completion streamed equals the non-streamed answer, with usage", async () => {
  const body = { model: "kjv", messages: [{ role: "user", content: "And the king said" }],
                 max_tokens: 24, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  });
  let text = "", chunks = 0, finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    const c = chunk.choices[0];
    if (c.delta.role) role = c.delta.role;
    text += c.delta.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, "assistant");
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, whole.usage.completion_tokens);
  assert.deepEqual(usage.prompt_tokens, whole.usage.prompt_tokens);
});

test("completions, streamed and not", async () => {
  const r = await client.completions.create({
    model: "kjv", prompt: "In the beginning", max_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  const stream = await client.completions.create({
    model: "kjv", prompt: "In the beginning", max_tokens: 12, temperature: 0, stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

test("greedy output over the API equals `hearth run --temp 0`", async () => {
  const prompt = "And the king said";
  const cli = await run(HEARTH, ["run", "-m", MODEL, "-p", prompt, "--temp", "0", "-n", "40",
                                 "-c", "512", "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  const expected = JSON.parse(cli.stdout);
  const r = await client.completions.create({ model: "kjv", prompt, max_tokens: 40, temperature: 0 });
  assert.equal(r.choices[0].text, expected.text);
  assert.ok(expected.text.length > 20);
});

test("llama-server's repeat_penalty / repeat_last_n equal `hearth run`'s; samplers it lacks are 400s", async () => {
  const prompt = "And the king said";
  const cli = await run(HEARTH, ["run", "-m", MODEL, "-p", prompt, "--temp", "0", "-n", "40", "-c", "512",
                                 "--repeat-penalty", "1.5", "--repeat-last-n", "16", "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  const expected = JSON.parse(cli.stdout).text;
  const body = { model: "kjv", prompt, max_tokens: 40, temperature: 0, repeat_penalty: 1.5, repeat_last_n: 16 };
  const r = await postJson(`${srv.base}/v1/completions`, body);
  assert.equal(r.status, 200);
  assert.equal(r.body.choices[0].text, expected);
  const plain = await postJson(`${srv.base}/v1/completions`, { ...body, repeat_penalty: 1 });
  assert.notEqual(plain.body.choices[0].text, expected);  // (the penalty changed the answer)
  for (const [field, value] of [["repeat_penalty", 0], ["repeat_last_n", -2], ["mirostat", 2],
                                ["repetition_penalty", 1.2], ["typical_p", 0.5], ["dry_multiplier", 0.8]]) {
    const bad = await postJson(`${srv.base}/v1/completions`, { ...body, [field]: value });
    assert.equal(bad.status, 400, field);
    assert.equal(bad.body.error.param, field);
  }
  // Their no-op values, as clients send them by default, pass.
  const noop = await postJson(`${srv.base}/v1/completions`,
                              { ...body, mirostat: 0, typical_p: 1, tfs_z: 1, repetition_penalty: 1 });
  assert.equal(noop.status, 200);
  assert.equal(noop.body.choices[0].text, expected);
});

test("seeded sampling repeats; stop strings cut the text", async () => {
  const body = { model: "kjv", prompt: "And God said", max_tokens: 20, temperature: 1.0,
                 top_p: 0.9, top_k: 50, min_p: 0.01, seed: 1234, presence_penalty: 0.5,
                 frequency_penalty: 0.3 };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const greedy = await client.completions.create({ model: "kjv", prompt: "And the king said",
                                                    max_tokens: 40, temperature: 0 });
  const full = greedy.choices[0].text;
  const word = full.trim().split(/\s+/)[2];
  const cut = await client.completions.create({ model: "kjv", prompt: "And the king said",
                                                 max_tokens: 40, temperature: 0, stop: [word] });
  assert.equal(cut.choices[0].finish_reason, "stop");
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(word)));
});

test("a conversation's next turn reuses the cached prefix", async () => {
  const messages = [{ role: "system", content: "You speak like the King James Bible." },
                    { role: "user", content: "Tell me of the house of David and his sons." }];
  const first = await client.chat.completions.create({ model: "kjv", messages, max_tokens: 8, temperature: 0 });
  messages.push(first.choices[0].message, { role: "user", content: "And then?" });
  const second = await client.chat.completions.create({ model: "kjv", messages, max_tokens: 8, temperature: 0 });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1,
            JSON.stringify(second.usage));
});

test("embeddings: float and base64, mean-pooled and L2-normalized", async () => {
  const r = await client.embeddings.create({ model: "kjv", input: ["the king", "the king", "bread and wine"] });
  assert.equal(r.data.length, 3);
  const [a, b, c] = r.data.map((d) => d.embedding);
  assert.equal(a.length, 256);
  const dot = (x, y) => x.reduce((s, v, i) => s + v * y[i], 0);
  assert.ok(Math.abs(dot(a, a) - 1) < 1e-4);
  assert.ok(Math.abs(dot(a, b) - 1) < 1e-4);
  assert.ok(dot(a, c) < 0.9999);
  const f = await postJson(`${srv.base}/v1/embeddings`, { input: "the king", encoding_format: "float" });
  assert.equal(f.status, 200);
  f.body.data[0].embedding.forEach((v, i) => assert.ok(Math.abs(v - a[i]) < 1e-6));
  assert.ok(f.body.usage.prompt_tokens >= 2);
});

test("errors come in the OpenAI shape with the right status", async () => {
  const bad = await postJson(`${srv.base}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], temperature: 7 });
  assert.equal(bad.status, 400);
  assertErrorShape(bad.body, "invalid_request_error");
  assert.equal(bad.body.error.param, "temperature");

  const missing = await postJson(`${srv.base}/v1/chat/completions`, { model: "x" });
  assert.equal(missing.status, 400);
  assert.equal(missing.body.error.param, "messages");

  const junk = await postJson(`${srv.base}/v1/completions`, "{not json");
  assert.equal(junk.status, 400);
  assertErrorShape(junk.body, "invalid_request_error");

  // Fields of the wrong JSON type are the client's 400 (each was a 500: the parser threw).
  const usage = await postJson(`${srv.base}/v1/chat/completions`, {
    messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: "yes" } });
  assert.equal(usage.status, 400);
  assert.equal(usage.body.error.param, "stream_options.include_usage");
  const part = await postJson(`${srv.base}/v1/chat/completions`, {
    messages: [{ role: "user", content: [{ type: 5, text: "hi" }] }] });
  assert.equal(part.status, 400);
  assert.match(part.body.error.message, /may only hold text parts/);

  const unknown = await postJson(`${srv.base}/v1/nothing`, {});
  assert.equal(unknown.status, 404);
  assertErrorShape(unknown.body);

  // The openai client raises typed errors from the same shape.
  await assert.rejects(
    client.completions.create({ model: "kjv", prompt: "x", max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens");
});

test("prompt + max_tokens beyond the context is a 400 that gives the numbers", async () => {
  const r = await postJson(`${srv.base}/v1/completions`, { prompt: "And the king said", max_tokens: 600 });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.code, "context_length_exceeded");
  assert.match(r.body.error.message, /512 tokens/);
  assert.match(r.body.error.message, /605 tokens \(5 in the prompt, 600 for the completion\)/);
  const long = await postJson(`${srv.base}/v1/completions`, { prompt: "king ".repeat(600), max_tokens: 1 });
  assert.equal(long.status, 400);
  assert.match(long.body.error.message, /maximum context length is 512 tokens, but the prompt has \d+ tokens/);
});

test("curl: chat, SSE stream ending with [DONE], Host header and body limits", async () => {
  const chat = await run("curl", ["-sS", "-X", "POST", `${srv.base}/v1/chat/completions`,
    "-H", "Content-Type: application/json",
    "-d", JSON.stringify({ messages: [{ role: "user", content: "Hello" }], max_tokens: 5 })]);
  assert.equal(chat.code, 0, chat.stderr);
  assert.equal(JSON.parse(chat.stdout).object, "chat.completion");

  const sse = await run("curl", ["-sSN", "-X", "POST", `${srv.base}/v1/completions`,
    "-H", "Content-Type: application/json",
    "-d", JSON.stringify({ prompt: "And", max_tokens: 6, stream: true, stream_options: { include_usage: true } })]);
  assert.equal(sse.code, 0, sse.stderr);
  const events = sse.stdout.split("\n\n").filter((e) => e.startsWith("data: "));
  assert.equal(events.at(-1), "data: [DONE]");
  const usage = JSON.parse(events.at(-2).slice(6));
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens, 6);

  // DNS rebinding: a loopback server refuses foreign Host names.
  const rebind = await run("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}",
    "-H", "Host: attacker.example", `${srv.base}/v1/models`]);
  assert.equal(rebind.stdout, "403");
  const local = await run("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}",
    "-H", `Host: localhost:${srv.port}`, `${srv.base}/v1/models`]);
  assert.equal(local.stdout, "200");

  const huge = await postJson(`${srv.base}/v1/completions`, { prompt: "x".repeat(9 << 20) });
  assert.equal(huge.status, 413);
  assertErrorShape(huge.body);
});

test("health and metrics", async () => {
  const h = await getJson(`${srv.base}/health`);
  assert.equal(h.status, 200);
  assert.equal(h.body.status, "ok");
  assert.equal(h.body.slots_total, 2);
  const m = await fetch(`${srv.base}/metrics`);
  const text = await m.text();
  for (const name of ["hearth_generated_tokens_total", "hearth_generation_tokens_per_second",
                      "hearth_queue_depth", "hearth_kv_positions_used", "hearth_kv_positions_capacity"])
    assert.match(text, new RegExp(`^${name} \\d`, "m"), name);
  assert.match(text, /^hearth_kv_positions_capacity 1024$/m);
  // The KV pool: parallel x ctx-size positions by default, in blocks, used + free = total.
  assert.match(text, /^hearth_kv_pool_tokens 1024$/m);
  const total = Number(text.match(/^hearth_kv_blocks_total (\d+)/m)[1]);
  const used = Number(text.match(/^hearth_kv_blocks\{state="used"\} (\d+)/m)[1]);
  const free = Number(text.match(/^hearth_kv_blocks\{state="free"\} (\d+)/m)[1]);
  assert.ok(total > 0 && used + free === total, `blocks ${used} + ${free} != ${total}`);
  assert.match(text, /^hearth_preemptions_total \d/m);
  assert.ok(Number(text.match(/^hearth_generated_tokens_total (\d+)/m)[1]) > 0);
});

test("API key: required, checked, and required for non-loopback binds", async () => {
  const keyed = await startServer(["--api-key", "sekret", "--parallel", "1", "-t", "1"]);
  try {
    const ok = new OpenAI({ baseURL: `${keyed.base}/v1`, apiKey: "sekret", maxRetries: 0 });
    assert.equal((await ok.models.list()).data.length, 1);
    const wrong = new OpenAI({ baseURL: `${keyed.base}/v1`, apiKey: "nope", maxRetries: 0 });
    await assert.rejects(wrong.models.list(),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === "invalid_api_key");
    const none = await getJson(`${keyed.base}/v1/models`);
    assert.equal(none.status, 401);
    assertErrorShape(none.body, "invalid_request_error");
    assert.equal((await getJson(`${keyed.base}/health`)).status, 200);
  } finally {
    await keyed.stop();
  }
  const open = await run(HEARTH, ["serve", "-m", MODEL, "--host", "0.0.0.0", "--port", "0"]);
  assert.notEqual(open.code, 0);
  assert.match(open.stderr, /--api-key/);
});

test("fallback: a request the local model cannot take goes to the remote, marked", async () => {
  const remote = await startServer(["--ctx-size", "1024", "--parallel", "1", "--api-key", "remote-key", "-t", "1"]);
  const local = await startServer(["--ctx-size", "64", "--parallel", "1", "--max-queue", "0", "-t", "1",
                                   "--fallback", `${remote.base}/v1`, "--fallback-key", "remote-key"]);
  try {
    const c = new OpenAI({ baseURL: `${local.base}/v1`, apiKey: "x", maxRetries: 0 });
    // Too long for the local 64-token context: answered by the remote.
    const long = { prompt: "And the king said unto them, ".repeat(8), max_tokens: 8, temperature: 0 };
    const { data, response } = await c.completions.create(long).withResponse();
    assert.equal(response.headers.get("x-hearth-fallback"), "context-length");
    assert.equal(data.usage.completion_tokens, 8);
    // Streaming through the fallback relays the remote's SSE.
    const stream = await c.completions.create({ ...long, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    assert.equal(text, data.choices[0].text);
    // Short requests stay local (no header).
    const short = await c.completions.create({ prompt: "And", max_tokens: 4 }).withResponse();
    assert.equal(short.response.headers.get("x-hearth-fallback"), null);
    // Queue full (1 slot, no queue): while a stream holds the slot, the next request is forwarded.
    const busy = await fetch(`${local.base}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "And", max_tokens: 60, ignore_eos: true, stream: true }) });
    const reader = busy.body.getReader();
    await reader.read();  // the slot is taken once the stream has started
    const r = await postJson(`${local.base}/v1/completions`, { prompt: "And", max_tokens: 2 });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("x-hearth-fallback"), "queue-full");
    while (!(await reader.read()).done) { /* drain the stream */ }
  } finally {
    await local.stop();
    await remote.stop();
  }
});
