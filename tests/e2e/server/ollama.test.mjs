// `hearth serve`'s Ollama routes through the official `ollama` npm client (and fetch where the
// client cannot express a case), on loopback with kjv-13m. Answers are checked against
// independent paths: `hearth run --temp 0` for raw generation, the OpenAI routes for chat
// rendering and embeddings, and the token counts against `context`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { startServer, postJson, getJson, run, HEARTH, MODEL } from "./helpers.mjs";

let srv;
let ollama;
let openai;

before(async () => {
  srv = await startServer(["--parallel", "2", "--ctx-size", "512", "-t", "2"]);
  ollama = new Ollama({ host: srv.base });
  openai = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, `server exit: ${JSON.stringify(r)} ${srv.stderr()}`);
  }
});

const greedy = (n) => ({ temperature: 0, num_predict: n });

test("version, tags, ps and show describe the loaded model", async () => {
  const v = await ollama.version();
  assert.match(v.version, /^\d+\.\d+\.\d+$/);
  const tags = await ollama.list();
  assert.equal(tags.models.length, 1);
  const m = tags.models[0];
  assert.ok(m.name.length > 0);
  assert.equal(m.model, m.name);
  assert.equal(m.details.family, "llama");
  assert.equal(m.details.format, "gguf");
  assert.equal(m.details.quantization_level, "Q8_0");
  assert.match(m.details.parameter_size, /^\d+\.\dM$/);
  assert.ok(m.size > 1e6);
  assert.ok(!Number.isNaN(Date.parse(m.modified_at)));
  const ps = await ollama.ps();
  assert.equal(ps.models[0].name, m.name);
  const show = await ollama.show({ model: m.name });
  assert.equal(show.model_info["general.architecture"], "llama");
  assert.equal(show.model_info["llama.embedding_length"], 256);
  assert.equal(show.model_info["tokenizer.vocab_size"], 32000);
  assert.ok(show.capabilities.includes("completion"));
  assert.equal(typeof show.template, "string");
});

test("raw generate, not streamed, equals `hearth run --temp 0`; context = prompt + output", async () => {
  const prompt = "And the king said";
  const cli = await run(HEARTH, ["run", "-m", MODEL, "-p", prompt, "--temp", "0", "-n", "12",
                                 "-c", "512", "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  const expected = JSON.parse(cli.stdout);
  const r = await ollama.generate({ model: "kjv", prompt, raw: true, stream: false,
                                    options: greedy(12) });
  assert.equal(r.response, expected.text);
  assert.equal(r.done, true);
  assert.equal(r.done_reason, "length");
  assert.equal(r.eval_count, 12);
  assert.ok(r.prompt_eval_count >= 1);
  assert.ok(r.total_duration >= r.prompt_eval_duration + r.eval_duration);
  assert.ok(r.eval_duration > 0 && r.prompt_eval_duration > 0);
  assert.ok(!Number.isNaN(Date.parse(r.created_at)));
  // The context is the prompt's tokens (BOS first) then the 12 generated ones.
  const tok = await run(HEARTH, ["tokenize", "-m", MODEL, "--json", "-p", prompt]);
  assert.equal(tok.code, 0, tok.stderr);
  const promptIds = JSON.parse(tok.stdout);
  assert.deepEqual(r.context.slice(0, promptIds.length), promptIds);
  assert.equal(r.context.length, promptIds.length + 12);
});

test("generate streamed equals the non-streamed answer; context continues it", async () => {
  // 40 tokens: a fast CPU with a busy host may hand a short answer's tokens to one write.
  const body = { model: "kjv", prompt: "In the beginning", raw: true, options: greedy(40) };
  const whole = await ollama.generate({ ...body, stream: false });
  let text = "", last = null, pieces = 0;
  for await (const part of await ollama.generate({ ...body, stream: true })) {
    if (!part.done) {
      pieces++;
      text += part.response;
    }
    last = part;
  }
  assert.ok(pieces >= 2, `only ${pieces} pieces`);
  assert.equal(text, whole.response);
  assert.equal(last.done, true);
  assert.equal(last.response, "");
  assert.equal(last.eval_count, 40);
  assert.deepEqual(last.context, whole.context);
  // Continuing from `context` with an empty raw prompt is the same greedy run, longer.
  const longer = await ollama.generate({ ...body, stream: false, options: greedy(46) });
  const next = await ollama.generate({ model: "kjv", prompt: "", raw: true, stream: false,
                                       context: whole.context, options: greedy(6) });
  assert.equal(whole.response + next.response, longer.response);
  assert.deepEqual(next.context, longer.context);
});

test("chat, streamed and not, renders the template as /v1/chat/completions does", async () => {
  const messages = [{ role: "system", content: "You are a scribe." },
                    { role: "user", content: "Who was David?" }];
  const r = await ollama.chat({ model: "kjv", messages, stream: false, options: greedy(10) });
  assert.equal(r.message.role, "assistant");
  assert.equal(r.done, true);
  assert.ok(["stop", "length"].includes(r.done_reason));
  assert.equal(r.context, undefined);
  const ref = await openai.chat.completions.create({ model: "kjv", messages, max_tokens: 10,
                                                     temperature: 0 });
  assert.equal(r.message.content, ref.choices[0].message.content);
  assert.equal(r.eval_count, ref.usage.completion_tokens);
  let text = "", last = null;
  for await (const part of await ollama.chat({ model: "kjv", messages, stream: true,
                                               options: greedy(10) })) {
    if (!part.done) {
      assert.equal(part.message.role, "assistant");
      text += part.message.content;
    }
    last = part;
  }
  assert.equal(text, r.message.content);
  assert.equal(last.done_reason, r.done_reason);
});

test("non-raw generate is a user turn of the chat template (with system)", async () => {
  const g = await ollama.generate({ model: "kjv", prompt: "Who was Moses?", system: "Be brief.",
                                    stream: false, options: greedy(8) });
  const c = await ollama.chat({ model: "kjv", stream: false, options: greedy(8),
                                messages: [{ role: "system", content: "Be brief." },
                                           { role: "user", content: "Who was Moses?" }] });
  assert.equal(g.response, c.message.content);
});

test("seeded sampling repeats; stop and repeat_penalty are honoured", async () => {
  const body = { model: "kjv", prompt: "And God said", raw: true, stream: false,
                 options: { temperature: 1.0, top_k: 50, top_p: 0.9, seed: 77, num_predict: 12 } };
  const a = await ollama.generate(body);
  const b = await ollama.generate(body);
  assert.equal(a.response, b.response);
  const base = await ollama.generate({ model: "kjv", prompt: "And God said", raw: true,
                                       stream: false, options: greedy(12) });
  const cut = base.response.trim().split(" ").slice(0, 2).join(" ");
  const stopped = await ollama.generate({ model: "kjv", prompt: "And God said", raw: true,
                                          stream: false,
                                          options: { ...greedy(12), stop: [cut.split(" ")[1]] } });
  assert.ok(!stopped.response.includes(cut.split(" ")[1]), stopped.response);
  assert.equal(stopped.done_reason, "stop");
  // repeat_penalty (Ollama's option; not an OpenAI field) against the CLI's --repeat-penalty.
  const prompt = "And the king said unto";
  const cli = await run(HEARTH, ["run", "-m", MODEL, "-p", prompt, "--temp", "0", "-n", "16",
                                 "-c", "512", "--repeat-penalty", "1.5", "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  const expected = JSON.parse(cli.stdout);
  const plain = await ollama.generate({ model: "kjv", prompt, raw: true, stream: false,
                                        options: greedy(16) });
  const penalized = await ollama.generate({ model: "kjv", prompt, raw: true, stream: false,
                                            options: { ...greedy(16), repeat_penalty: 1.5 } });
  assert.equal(penalized.response, expected.text);
  assert.notEqual(penalized.response, plain.response);
});

test("embed equals /v1/embeddings; dimensions renormalizes; legacy embeddings", async () => {
  const input = ["In the beginning", "And the king said"];
  const e = await ollama.embed({ model: "kjv", input });
  assert.equal(e.embeddings.length, 2);
  const ref = await openai.embeddings.create({ model: "kjv", input });
  for (let i = 0; i < 2; i++) {
    assert.equal(e.embeddings[i].length, 256);
    for (let k = 0; k < 256; k++)
      assert.ok(Math.abs(e.embeddings[i][k] - ref.data[i].embedding[k]) < 1e-6);
  }
  assert.equal(e.prompt_eval_count, ref.usage.prompt_tokens);
  const d = await ollama.embed({ model: "kjv", input: input[0], dimensions: 8 });
  const v = d.embeddings[0];
  assert.equal(v.length, 8);
  const norm = Math.hypot(...v);
  assert.ok(Math.abs(norm - 1) < 1e-5);
  const scale = Math.hypot(...ref.data[0].embedding.slice(0, 8));
  for (let k = 0; k < 8; k++) assert.ok(Math.abs(v[k] - ref.data[0].embedding[k] / scale) < 1e-5);
  const legacy = await ollama.embeddings({ model: "kjv", prompt: input[0] });
  assert.equal(legacy.embedding.length, 256);
  for (let k = 0; k < 256; k++)
    assert.ok(Math.abs(legacy.embedding[k] - ref.data[0].embedding[k]) < 1e-6);
});

test("an empty prompt or no messages only loads the model (done_reason load)", async () => {
  const g = await ollama.generate({ model: "kjv", prompt: "", stream: false });
  assert.equal(g.done, true);
  assert.equal(g.done_reason, "load");
  const c = await ollama.chat({ model: "kjv", messages: [], stream: false });
  assert.equal(c.done_reason, "load");
});

test("bad requests are a 400 whose error names the field; the client throws it", async () => {
  const cases = [
    [{ model: "kjv", prompt: "x", format: "xml" }, "format", "generate"],
    [{ model: "kjv", prompt: "x", format: { type: "object", if: {} } }, "format", "generate"],
    [{ model: "kjv", prompt: "x", options: { bogus: 1 } }, "options.bogus", "generate"],
    [{ model: "kjv", prompt: "x", options: { temperature: 7 } }, "options.temperature", "generate"],
    [{ model: "kjv", prompt: "x", options: { num_predict: 0 } }, "options.num_predict", "generate"],
    [{ model: "kjv", prompt: "x", options: { mirostat: 2 } }, "options.mirostat", "generate"],
    [{ model: "kjv", prompt: "x", options: { num_ctx: 100000 } }, "options.num_ctx", "generate"],
    [{ model: "kjv", prompt: "x", context: [1, -5] }, "context", "generate"],
    [{ model: "kjv", prompt: "x", images: ["aGk="] }, "images", "generate"],
    [{ model: "kjv", prompt: "x", unknown_field: true }, "unknown_field", "generate"],
    [{ model: "kjv", messages: [{ role: "user", content: 5 }] }, "messages[0].content", "chat"],
    [{ model: "kjv", messages: [{ role: "user", content: "x", images: ["aGk="] }] },
     "messages[0].images", "chat"],
    [{ model: "kjv", messages: [{ role: "user", content: "x" }],
       tools: [{ type: "function", function: { name: "bad name" } }] }, "tools[0].function.name", "chat"],
    [{ model: "kjv", input: 5 }, "input", "embed"],
    [{ model: "kjv", input: "x", dimensions: 100000 }, "dimensions", "embed"],
  ];
  for (const [body, field, route] of cases) {
    const r = await postJson(`${srv.base}/api/${route}`,
                             route === "embed" ? body : { stream: false, ...body });
    assert.equal(r.status, 400, `${JSON.stringify(body)} -> ${r.status} ${JSON.stringify(r.body)}`);
    assert.equal(typeof r.body.error, "string");
    assert.ok(r.body.error.includes(`'${field}'`), `${r.body.error} should name ${field}`);
  }
  await assert.rejects(ollama.generate({ model: "kjv", prompt: "x", format: "yaml", stream: false }),
                       (e) => e.status_code === 400 && /'format'/.test(e.message));
  const show = await postJson(`${srv.base}/api/show`, {});
  assert.equal(show.status, 400);
  assert.match(show.body.error, /'model'/);
  const bad = await postJson(`${srv.base}/api/chat`, "{not json");
  assert.equal(bad.status, 400);
  assert.equal(typeof bad.body.error, "string");
});

test("Ollama routes pass the server's policies: methods, Host, Origin, API key", async () => {
  const get = await getJson(`${srv.base}/api/chat`);
  assert.equal(get.status, 405);
  const post = await postJson(`${srv.base}/api/tags`, {});
  assert.equal(post.status, 405);
  // fetch() cannot set Host; curl can.
  const host = await run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                                  "Host: 127.0.0.1.evil.com", `${srv.base}/api/tags`]);
  assert.equal(host.stdout, "403");
  const origin = await fetch(`${srv.base}/api/generate`, {
    method: "POST", headers: { "Content-Type": "text/plain", Origin: "http://evil.example" },
    body: JSON.stringify({ model: "kjv", prompt: "x", stream: false }),
  });
  assert.equal(origin.status, 403);
  const keyed = await startServer(["--ctx-size", "256", "-t", "1", "--api-key", "sekrit"]);
  try {
    const no = await getJson(`${keyed.base}/api/tags`);
    assert.equal(no.status, 401);
    const client = new Ollama({ host: keyed.base, headers: { Authorization: "Bearer sekrit" } });
    const v = await client.version();
    assert.match(v.version, /^\d+\.\d+\.\d+$/);
  } finally {
    await keyed.stop();
  }
});
