// Several choices per request (`n`) and the prefix cache across slots on `hearth serve`
// (kjv-13m, loopback), through the official `openai` client and fetch: n choices with their
// indexes, seeded and repeatable, greedy ones equal to `hearth run --temp 0`, streamed chunks
// carrying their choice index, usage counting the prompt once, 400s naming `n`, a constraint per
// choice, and a prompt whose prefix another (busy) slot holds answering exactly as a cold run
// while /metrics counts the copy.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { postJson, run, assertErrorShape, startWithClients, stopCleanly, HEARTH, MODEL }
  from "./helpers.mjs";

let srv;
let client;

before(async () => {
  ({ srv, client } = await startWithClients(["--parallel", "3", "--ctx-size", "512", "-t", "2"]));
});
after(() => stopCleanly(srv));

async function hearthRunGreedy(prompt, n) {
  const cli = await run(HEARTH, ["run", "-m", MODEL, "-p", prompt, "--temp", "0", "-n", String(n),
                                 "-c", "512", "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  return JSON.parse(cli.stdout).text;
}

async function metric(name) {
  const text = await (await fetch(`${srv.base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name.replace(/[{}"]/g, "\\$&")} (\\d+)`, "m"));
  assert.ok(m, `${name} missing from /metrics:\n${text}`);
  return Number(m[1]);
}

test("n=3 with a seed: three indexed choices, repeatable, usage counts the prompt once", async () => {
  const body = { model: "kjv", prompt: "And God said", max_tokens: 16, temperature: 1.0, seed: 77,
                 n: 3, logprobs: 1 };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(new Set(a.choices.map((c) => c.text)).size, 3, "choices sample independently");
  for (const c of a.choices) {
    assert.equal(c.finish_reason, "length");
    assert.ok(c.logprobs.tokens.length > 0 && c.logprobs.token_logprobs.length === c.logprobs.tokens.length);
  }
  const single = await client.completions.create({ ...body, n: 1 });
  assert.equal(single.choices[0].text, a.choices[0].text, "choice 0 is the n=1 answer");
  assert.equal(a.usage.completion_tokens, 3 * 16);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 3 * 16);
  const other = await client.completions.create({ ...body, seed: 78 });
  assert.notDeepEqual(other.choices.map((c) => c.text), a.choices.map((c) => c.text));
});

test("temperature 0: every choice equals `hearth run --temp 0`", async () => {
  const prompt = "And the king said";
  const expected = await hearthRunGreedy(prompt, 30);
  const r = await client.completions.create({ model: "kjv", prompt, max_tokens: 30, temperature: 0, n: 3 });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) assert.equal(c.text, expected);
});

test("openai client, chat with n=2: non-streamed and streamed agree per index", async () => {
  const messages = [{ role: "user", content: "Who was David?" }];
  const plain = await client.chat.completions.create({ model: "kjv", messages, max_tokens: 12,
                                                       temperature: 0, n: 2 });
  assert.deepEqual(plain.choices.map((c) => c.index), [0, 1]);
  const stream = await client.chat.completions.create({ model: "kjv", messages, max_tokens: 12,
                                                        temperature: 0, n: 2, stream: true,
                                                        stream_options: { include_usage: true } });
  const texts = ["", ""];
  const finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.ok(c.index === 0 || c.index === 1, JSON.stringify(chunk));
      texts[c.index] += c.delta?.content ?? "";
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(texts, plain.choices.map((c) => c.message.content));
  assert.deepEqual(finish, plain.choices.map((c) => c.finish_reason));
  assert.ok(texts[0].length > 0);
  assert.equal(usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
});

test("bad n is a 400 naming the field; more choices than slots says so", async () => {
  for (const n of [0, 9, -1, 1.5, "2", true]) {
    const r = await postJson(`${srv.base}/v1/completions`, { prompt: "Amen", n });
    assert.equal(r.status, 400, JSON.stringify({ n, body: r.body }));
    assertErrorShape(r.body, "invalid_request_error");
    assert.equal(r.body.error.param, "n");
  }
  const r = await postJson(`${srv.base}/v1/chat/completions`,
                           { messages: [{ role: "user", content: "Amen" }], n: 4 });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.param, "n");
  assert.match(r.body.error.message, /3 slots/);
});

test("a prefix held by a busy slot is copied: the answer equals a cold run, /metrics counts it", async () => {
  const shared = "In the beginning God created the heaven and the earth. And the earth was without " +
                 "form, and void; and darkness was upon the face of the deep. And the Spirit of God " +
                 "moved upon the face of the waters.";
  const prompt = `${shared} And God said`;
  const expected = await hearthRunGreedy(prompt, 24);
  const copiedBefore = await metric('hearth_prefix_cache_hits_total{source="copied"}');
  const computedBefore = await metric('hearth_prefix_cache_tokens_total{source="computed"}');
  // Every slot busy with the shared prefix, so the next request finds it only in a busy slot.
  const controller = new AbortController();
  const busy = [];
  for (let i = 0; i < 2; i++) {
    const s = await client.completions.create(
      { model: "kjv", prompt: `${shared} And the king said`, max_tokens: 400, ignore_eos: true,
        temperature: 0, stream: true },
      { signal: controller.signal });
    const it = s[Symbol.asyncIterator]();
    await it.next();  // its prompt is in the cache once the first token arrives
    busy.push(it);
  }
  const r = await client.completions.create({ model: "kjv", prompt, max_tokens: 24, temperature: 0 });
  controller.abort();
  for (const it of busy) await it.return?.().catch(() => {});
  assert.equal(r.choices[0].text, expected);
  assert.ok(r.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(r.usage));
  assert.ok(await metric('hearth_prefix_cache_hits_total{source="copied"}') >= copiedBefore + 1);
  const computed = await metric('hearth_prefix_cache_tokens_total{source="computed"}');
  assert.ok(computed > computedBefore, "the busy requests' prompts were computed");
  assert.ok(await metric('hearth_prefix_cache_tokens_total{source="copied"}') >=
            r.usage.prompt_tokens_details.cached_tokens);
});

test("each choice keeps to response_format on its own", async () => {
  const r = await client.chat.completions.create({
    model: "kjv", messages: [{ role: "user", content: "Who was David?" }], n: 2, max_tokens: 40,
    seed: 3, temperature: 0.9, response_format: { type: "json_object" } });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, "stop", c.message.content);
    const v = JSON.parse(c.message.content);
    assert.equal(typeof v, "object");
  }
  assert.notEqual(r.choices[0].message.content, r.choices[1].message.content);
});
