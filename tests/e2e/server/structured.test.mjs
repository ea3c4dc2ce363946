// Structured output on `hearth serve`: OpenAI's response_format (json_schema, json_object),
// llama-server's `grammar`, Ollama's `format`, and their 400s, through the official `openai` and
// `ollama` clients. kjv-13m has never seen JSON, so every valid answer is the constraint's doing.
// 50 seeded random schemas run 4 at a time on 4 slots (batched decoding, each job its own
// constraint state), some streamed, some on /v1/completions; each answer must parse and
// validate against its schema with schema-validate.mjs (exactly the generator's keywords).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startWithClients, stopCleanly, postJson, assertErrorShape, SANITIZED } from "./helpers.mjs";
import { validate } from "./schema-validate.mjs";

let srv;
let client;
let ollama;

before(async () => {
  ({ srv, client, ollama } = await startWithClients(["--parallel", "4", "--ctx-size", "1024", "-t", "2"]));
});
after(() => stopCleanly(srv));

// ---------------------------------------------------------------- seeded schema generator

function rng(seed) {  // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function makeSchema(seed) {
  const r = rng(seed);
  const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
  const pick = (xs) => xs[int(0, xs.length - 1)];
  const words = ["king", "david", "lord", "israel", "moses", "city", "land", "seed"];
  const defs = {};
  const defNames = [];

  const leaf = () => {
    switch (int(0, 5)) {
      case 0: return { type: "string", maxLength: int(0, 10) };
      case 1: {
        const lo = int(-50, 50);
        return { type: "integer", minimum: lo, maximum: lo + int(0, 1000) };
      }
      case 2: return { type: "boolean" };
      case 3: return { enum: Array.from({ length: int(1, 4) }, () => (r() < 0.7 ? pick(words) : int(-9, 99))) };
      case 4: return { const: r() < 0.5 ? pick(words) : r() < 0.5 ? int(-5, 5) : [int(0, 9), pick(words)] };
      default: return { type: "string", minLength: int(0, 2), maxLength: int(2, 8) };
    }
  };
  const node = (depth) => {
    const k = depth >= 3 ? 0 : int(0, 9);
    if (k <= 3) return leaf();
    if (k <= 5) {
      const properties = {};
      const required = [];
      const n = int(1, 4);
      for (let i = 0; i < n; ++i) {
        const name = `${pick(words)}_${i}`;
        properties[name] = node(depth + 1);
        if (r() < 0.6) required.push(name);
      }
      return { type: "object", properties, required, additionalProperties: false };
    }
    if (k === 6) {
      const min = int(0, 2);
      return { type: "array", items: node(depth + 1), minItems: min, maxItems: min + int(0, 2) };
    }
    if (k === 7) return { anyOf: [node(depth + 1), node(depth + 1)] };
    if (defNames.length > 0 && r() < 0.8) return { $ref: `#/$defs/${pick(defNames)}` };
    // Defined before it is named, so no definition refers to itself (no endless recursion).
    const def = node(depth + 1);
    const name = `d${defNames.length}`;
    defNames.push(name);
    defs[name] = def;
    return { $ref: `#/$defs/${name}` };
  };

  const properties = {};
  const required = [];
  const n = int(1, 4);
  for (let i = 0; i < n; ++i) {
    const name = `f${i}`;
    properties[name] = node(1);
    if (r() < 0.7) required.push(name);
  }
  const schema = { type: "object", properties, required, additionalProperties: false };
  if (defNames.length > 0) schema.$defs = defs;
  return schema;
}

test("the validator refuses what the schemas forbid (it can fail)", () => {
  const s = { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 3 },
    b: { type: "array", items: { enum: ["x"] }, minItems: 1, maxItems: 1 } }, required: ["a"],
    additionalProperties: false };
  assert.equal(validate(s, { a: 2, b: ["x"] }, s), "");
  assert.notEqual(validate(s, { a: 4 }, s), "");
  assert.notEqual(validate(s, { b: ["x"] }, s), "");
  assert.notEqual(validate(s, { a: 1, b: [] }, s), "");
  assert.notEqual(validate(s, { a: 1, c: 1 }, s), "");
  assert.notEqual(validate(s, { a: 1.5 }, s), "");
});

// ---------------------------------------------------------------- the tests

const chat = (content) => [{ role: "user", content }];

// One schema, one request: chat or completions, streamed or not. Returns { text, finish }.
async function generate(i, schema) {
  const response_format = { type: "json_schema", json_schema: { name: `s${i}`, schema, strict: true } };
  const common = { model: "kjv", max_tokens: 400, seed: i, temperature: 1, response_format };
  const stream = i % 3 === 0;
  if (i % 5 === 4) {
    if (!stream) {
      const r = await client.completions.create({ ...common, prompt: "And the king said" });
      return { text: r.choices[0].text, finish: r.choices[0].finish_reason };
    }
    let text = "";
    let finish = null;
    for await (const c of await client.completions.create({ ...common, prompt: "And", stream })) {
      text += c.choices[0]?.text ?? "";
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    return { text, finish };
  }
  if (!stream) {
    const r = await client.chat.completions.create({ ...common, messages: chat("Who was David?") });
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  let text = "";
  let finish = null;
  for await (const c of await client.chat.completions.create({ ...common, messages: chat("Tell me"), stream })) {
    text += c.choices[0]?.delta?.content ?? "";
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

// The ASan + UBSan pass runs the first 12 (it decodes ~20x slower); the release pass all 50.
const N_SCHEMAS = SANITIZED ? 12 : 50;

test(`${N_SCHEMAS} random JSON Schemas, 4 at a time: every answer parses and validates`, async () => {
  const schemas = Array.from({ length: N_SCHEMAS }, (_, i) => makeSchema(1000 + i));
  const failures = [];
  let next = 0;
  const worker = async () => {
    while (next < schemas.length) {
      const i = next++;
      const { text, finish } = await generate(i, schemas[i]);
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        failures.push(`#${i}: not JSON (${e.message}): ${text}`);
        continue;
      }
      const why = validate(schemas[i], value, schemas[i]);
      if (why) failures.push(`#${i}: ${why}: ${text} for ${JSON.stringify(schemas[i])}`);
      if (finish !== "stop") failures.push(`#${i}: finish_reason ${finish}`);
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  assert.deepEqual(failures, []);
});

test("json_object: the answer is a JSON object, streamed or not", async () => {
  for (const stream of [false, true]) {
    const req = { model: "kjv", messages: chat("Who was Moses?"), max_tokens: 64, seed: 7,
                  response_format: { type: "json_object" } };
    let text = "";
    let finish = null;
    if (stream) {
      for await (const c of await client.chat.completions.create({ ...req, stream })) {
        text += c.choices[0]?.delta?.content ?? "";
        finish = c.choices[0]?.finish_reason ?? finish;
      }
    } else {
      const r = await client.chat.completions.create(req);
      text = r.choices[0].message.content;
      finish = r.choices[0].finish_reason;
    }
    const v = JSON.parse(text);
    assert.ok(v && typeof v === "object" && !Array.isArray(v), text);
    assert.equal(finish, "stop");
  }
  // A tight max_tokens: the budget makes the constraint close the object in time.
  for (const max_tokens of [4, 8, 12, 20]) {
    const r = await client.chat.completions.create({ model: "kjv", messages: chat("Who was Aaron?"),
                                                     max_tokens, seed: max_tokens, temperature: 1.5,
                                                     response_format: { type: "json_object" } });
    const v = JSON.parse(r.choices[0].message.content);
    assert.ok(v && typeof v === "object" && !Array.isArray(v), r.choices[0].message.content);
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.ok(r.usage.completion_tokens <= max_tokens);
  }
  const plain = await client.chat.completions.create({ model: "kjv", messages: chat("Hi"), max_tokens: 4,
                                                        response_format: { type: "text" } });
  assert.equal(typeof plain.choices[0].message.content, "string");
});

test("grammar (GBNF) on both routes: the answer is a sentence of it", async () => {
  const grammar = 'root ::= "yes" | "no"';
  for (let seed = 0; seed < 4; ++seed) {
    const c = await client.chat.completions.create({ model: "kjv", messages: chat("Is it so?"),
                                                     max_tokens: 8, seed, grammar });
    assert.ok(["yes", "no"].includes(c.choices[0].message.content), c.choices[0].message.content);
    assert.equal(c.choices[0].finish_reason, "stop");
  }
  const p = await client.completions.create({ model: "kjv", prompt: "And he said", max_tokens: 16,
                                              grammar: 'root ::= [0-9]{3} "-" ("a" | "b")' });
  assert.match(p.choices[0].text, /^[0-9]{3}-[ab]$/);
});

test("Ollama format: \"json\" and a JSON Schema, on /api/chat and /api/generate", async () => {
  const asJson = await ollama.chat({ model: "kjv", messages: chat("Who was Saul?"), format: "json",
                                     stream: false, options: { num_predict: 64, seed: 3 } });
  const v = JSON.parse(asJson.message.content);
  assert.ok(v && typeof v === "object" && !Array.isArray(v), asJson.message.content);
  const schema = { type: "object", properties: { name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 1, maximum: 120 } }, required: ["name", "age"] };
  const s = await ollama.chat({ model: "kjv", messages: chat("Who was Saul?"), format: schema,
                                stream: false, options: { num_predict: 64 } });
  const sv = JSON.parse(s.message.content);
  assert.equal(typeof sv.name, "string");
  assert.ok(Number.isInteger(sv.age) && sv.age >= 1 && sv.age <= 120, s.message.content);
  let text = "";
  for await (const part of await ollama.generate({ model: "kjv", prompt: "And", format: schema,
                                                   stream: true, options: { num_predict: 64 } }))
    text += part.response;
  const gv = JSON.parse(text);
  assert.equal(validate({ ...schema, additionalProperties: false }, gv, schema), "", text);
  const bad = await postJson(`${srv.base}/api/chat`, { model: "kjv", messages: chat("x"), stream: false,
                                                       format: { type: "object", not: {} } });
  assert.equal(bad.status, 400);
  assert.ok(bad.body.error.includes("'format'") && /unsupported keyword 'not'/.test(bad.body.error), bad.body.error);
});

test("bad structured-output requests are 400s naming the field", async () => {
  const base = { model: "kjv", messages: chat("x"), max_tokens: 4 };
  const cases = [
    [{ response_format: { type: "json_schema", json_schema: { name: "s", strict: true,
       schema: { type: "object", properties: { n: { type: "integer", multipleOf: 3 } } } } } },
     "response_format.json_schema.schema", /unsupported keyword 'multipleOf'/],
    [{ grammar: 'root ::= "a" undefined-rule' }, "grammar", /undefined-rule/],
    [{ grammar: 'root ::= "unterminated' }, "grammar", /'grammar'/],
    [{ response_format: { type: "xml" } }, "response_format.type", /"xml"/],
    [{ response_format: { type: "json_schema", json_schema: { name: "s" } } },
     "response_format.json_schema.schema", /required/],
    [{ response_format: "json" }, "response_format", /object/],
    [{ grammar: 'root ::= "a"', response_format: { type: "json_schema",
       json_schema: { name: "s", schema: { type: "object" } } } }, "grammar", /response_format/],
  ];
  for (const [fields, param, message] of cases) {
    for (const route of ["chat/completions", "completions"]) {
      const body = route === "completions" ? { model: "kjv", prompt: "x", max_tokens: 4, ...fields }
                                           : { ...base, ...fields };
      const r = await postJson(`${srv.base}/v1/${route}`, body);
      assert.equal(r.status, 400, `${route} ${JSON.stringify(fields)}: ${JSON.stringify(r.body)}`);
      assertErrorShape(r.body, "invalid_request_error");
      assert.equal(r.body.error.param, param);
      assert.match(r.body.error.message, message);
    }
  }
  await assert.rejects(
    client.chat.completions.create({ ...base, response_format: { type: "json_schema",
      json_schema: { name: "s", schema: { type: "object", properties: { a: { not: {} } } } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format.json_schema.schema" &&
           /unsupported keyword 'not'/.test(e.message));
});
