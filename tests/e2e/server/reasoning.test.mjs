// Reasoning on `hearth serve`: a <think> block split into message.reasoning_content (OpenAI,
// reasoning_format "auto") and message.thinking / thinking (Ollama, think: true), streamed and
// not. kjv-13m never writes think tags by itself, so a GBNF grammar makes it (SentencePiece byte
// fallback can spell any bytes); a raw Ollama prompt ending in "<think>" starts the output inside
// the block. The same seed gives the same tokens whatever reasoning_format says, so the split
// answer is checked against the inline one.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startWithClients, stopCleanly, postJson, assertErrorShape } from "./helpers.mjs";

let srv;
let client;
let ollama;

before(async () => {
  ({ srv, client, ollama } = await startWithClients(["--parallel", "2", "--ctx-size", "512", "-t", "2"]));
});
after(() => stopCleanly(srv));

const chat = (content) => [{ role: "user", content }];
const grammar = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z ]{1,20}';
const THINK = /^<think>([a-z ]+)<\/think>([a-z ]+)$/;

test("reasoning_format none keeps the block inline; auto splits it, not streamed", async () => {
  for (let seed = 0; seed < 3; ++seed) {
    const ask = { model: "kjv", messages: chat("Is it so?"), max_tokens: 96, seed, grammar };
    const inline = await client.chat.completions.create({ ...ask, reasoning_format: "none" });
    const raw = inline.choices[0].message.content;
    const m = THINK.exec(raw);
    assert.ok(m, `not a sentence of the grammar: ${JSON.stringify(raw)}`);
    assert.ok(!("reasoning_content" in inline.choices[0].message));
    for (const format of [undefined, "auto"]) {
      const split = await client.chat.completions.create({ ...ask, reasoning_format: format });
      const msg = split.choices[0].message;
      assert.equal(msg.reasoning_content, m[1], JSON.stringify(raw));
      assert.equal(msg.content, m[2], JSON.stringify(raw));
      assert.equal(split.choices[0].finish_reason, "stop");
    }
  }
});

test("streamed: reasoning_content deltas, then content deltas, never a tag", async () => {
  for (let seed = 0; seed < 3; ++seed) {
    const ask = { model: "kjv", messages: chat("Who was Saul?"), max_tokens: 96, seed, grammar };
    const raw = (await client.chat.completions.create({ ...ask, reasoning_format: "none" }))
      .choices[0].message.content;
    const m = THINK.exec(raw);
    assert.ok(m, JSON.stringify(raw));
    let reasoning = "", content = "", sawContent = false, finish = null;
    for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
      const d = chunk.choices[0]?.delta ?? {};
      if (d.reasoning_content) {
        assert.ok(!sawContent, "reasoning after content");
        reasoning += d.reasoning_content;
      }
      if (d.content) {
        sawContent = true;
        content += d.content;
      }
      assert.ok(!(d.reasoning_content ?? "").includes("<") && !(d.content ?? "").includes("<"),
                JSON.stringify(d));
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(reasoning, m[1]);
    assert.equal(content, m[2]);
    assert.equal(finish, "stop");
  }
});

test("no think block: all content, no reasoning_content", async () => {
  const c = await client.chat.completions.create({ model: "kjv", messages: chat("Is it so?"),
                                                   max_tokens: 8, grammar: 'root ::= "yes" | "no"' });
  assert.ok(["yes", "no"].includes(c.choices[0].message.content));
  assert.ok(!("reasoning_content" in c.choices[0].message));
  for await (const chunk of await client.chat.completions.create({
    model: "kjv", messages: chat("Hi"), max_tokens: 8, stream: true }))
    assert.ok(!("reasoning_content" in (chunk.choices[0]?.delta ?? {})));
});

test("a bad reasoning_format is a 400 naming the field", async () => {
  for (const value of ["deepseek-r1", 3, true]) {
    const r = await postJson(`${srv.base}/v1/chat/completions`,
                             { model: "kjv", messages: chat("x"), reasoning_format: value });
    assert.equal(r.status, 400);
    assertErrorShape(r.body, "invalid_request_error");
    assert.equal(r.body.error.param, "reasoning_format");
  }
});

test("Ollama think: a prompt ending in <think> puts the answer in thinking", async () => {
  const ask = { model: "kjv", prompt: "And he said <think>\n", raw: true,
                options: { num_predict: 12, seed: 5, temperature: 0 } };
  const inline = await ollama.generate({ ...ask, stream: false });
  assert.ok(inline.response.length > 0);
  assert.equal(inline.thinking, undefined);
  const thought = await ollama.generate({ ...ask, stream: false, think: true });
  assert.equal(thought.thinking, inline.response.replace(/^[\r\n]+/, ""));
  assert.equal(thought.response, "");
  let thinking = "", response = "";
  for await (const part of await ollama.generate({ ...ask, stream: true, think: true })) {
    thinking += part.thinking ?? "";
    response += part.response;
  }
  assert.equal(thinking, thought.thinking);
  assert.equal(response, "");
  // /api/chat: think true on an answer without a block leaves it all in content.
  const c = await postJson(`${srv.base}/api/chat`, { model: "kjv", messages: chat("Hi"), think: true,
                                                     stream: false, options: { num_predict: 8 } });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(typeof c.body.message.content, "string");
  assert.ok(!("thinking" in c.body.message));
  const off = await postJson(`${srv.base}/api/chat`, { model: "kjv", messages: chat("Hi"), think: false,
                                                       stream: false, options: { num_predict: 8 } });
  assert.equal(off.status, 200);
  const bad = await postJson(`${srv.base}/api/chat`, { model: "kjv", messages: chat("Hi"), think: "yes" });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error, /think/);
});
