// Tool calling on `hearth serve` through the official `openai` and `ollama` clients. kjv-13m knows
// no JSON and no tools, so every valid call is the grammar's doing: with tool_choice "required" (or
// a named function) each answer must be a tool_calls entry of a declared function whose arguments
// validate against that function's schema (schema-validate.mjs, independent of the server), in the
// Qwen2.5 template's <tool_call> syntax (Hermes family) that the server parses back. A second
// server with a template that has no call syntax (generic family) serves Ollama's tools + format.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { startWithClients, startServer, stopCleanly, postJson, assertErrorShape, SANITIZED } from "./helpers.mjs";
import { validate } from "./schema-validate.mjs";

const FIXTURES = new URL("../../unit/chat/fixtures/", import.meta.url).pathname;
const QWEN_TEMPLATE = `${FIXTURES}published/Qwen-Qwen2.5-7B-Instruct.jinja`;
const PLAIN_TEMPLATE = `${FIXTURES}chatml.jinja`;
// Each request is ~400 tokens of prompt and 50-120 of output; ASan runs ~75x slower, so there
// fewer requests go (every check still runs).
const N = SANITIZED ? 2 : 12;
const NAMED = SANITIZED ? ["search"] : ["get_weather", "search", "set_mode"];
const SEEDS = SANITIZED ? [11] : [11, 12, 13];

let srv;
let client;

before(async () => {
  ({ srv, client } = await startWithClients(["--parallel", "4", "--ctx-size", "2048", "-t", "2",
                                             "--chat-template-file", QWEN_TEMPLATE]));
});
after(() => stopCleanly(srv));

// Three functions: a nested object with an enum, an array with an integer, an enum and a boolean.
const FUNCTIONS = {
  get_weather: {
    type: "object",
    properties: {
      city: { type: "string", minLength: 1, maxLength: 12 },
      unit: { enum: ["celsius", "fahrenheit"] },
      where: {
        type: "object",
        properties: { country: { type: "string", maxLength: 8 }, days: { type: "integer", minimum: 1, maximum: 7 } },
        required: ["country", "days"],
        additionalProperties: false,
      },
    },
    required: ["city", "unit", "where"],
    additionalProperties: false,
  },
  search: {
    type: "object",
    properties: {
      terms: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 1, maxItems: 3 },
      limit: { type: "integer", minimum: 1, maximum: 20 },
    },
    required: ["terms"],
    additionalProperties: false,
  },
  set_mode: {
    type: "object",
    properties: { mode: { enum: ["quiet", "loud", 3] }, confirm: { type: "boolean" } },
    required: ["mode", "confirm"],
    additionalProperties: false,
  },
};
const TOOLS = Object.entries(FUNCTIONS).map(([name, parameters]) => (
  { type: "function", function: { name, description: `the ${name} function`, parameters } }));
const messages = [{ role: "user", content: "What is the weather in Paris for three days?" }];

// A message's tool calls must be well formed, declared, and valid against their schemas.
function checkCalls(calls, allowed = Object.keys(FUNCTIONS)) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, `no tool_calls: ${JSON.stringify(calls)}`);
  for (const c of calls) {
    assert.equal(c.type, "function");
    assert.match(c.id, /^call_[A-Za-z0-9]+$/);
    assert.ok(allowed.includes(c.function.name), c.function.name);
    const args = JSON.parse(c.function.arguments);
    const schema = FUNCTIONS[c.function.name];
    assert.equal(validate(schema, args, schema), "", `${c.function.name}: ${c.function.arguments}`);
  }
}

// The streamed deltas put together as the openai SDK's docs do: per index, id/type/name from the
// first delta, arguments concatenated.
async function accumulate(stream) {
  const calls = [];
  let finish = null;
  let content = "";
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) finish = choice.finish_reason;
    if (choice.delta?.content) content += choice.delta.content;
    for (const d of choice.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: d.id, type: d.type, function: { name: d.function?.name, arguments: "" } };
      if (d.id) assert.equal(d.function.arguments, "", "the first delta of a call has empty arguments");
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
  }
  return { calls, finish, content };
}

test(`tool_choice "required": ${N} answers, each a valid call of a declared function`, async () => {
  await Promise.all(Array.from({ length: N }, async (_, i) => {
    const r = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: "required",
      max_tokens: 120, seed: 100 + i, temperature: 1, parallel_tool_calls: i % 2 === 0 });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, null);
    checkCalls(choice.message.tool_calls);
  }));
});

test(`tool_choice "required", streamed: ${N} answers, each a valid call`, async () => {
  await Promise.all(Array.from({ length: N }, async (_, i) => {
    const stream = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: "required",
      max_tokens: 120, seed: 200 + i, temperature: 1, stream: true, parallel_tool_calls: i % 2 === 0 });
    const { calls, finish } = await accumulate(stream);
    assert.equal(finish, "tool_calls");
    checkCalls(calls);
  }));
});

test("n choices with a required call: each choice's own grammar gives each a valid call", async () => {
  const r = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: "required",
    max_tokens: 120, seed: 300, temperature: 1, n: 3 });
  assert.equal(r.choices.length, 3);
  for (const choice of r.choices) {
    assert.equal(choice.finish_reason, "tool_calls");
    checkCalls(choice.message.tool_calls);
  }
});

test("a named tool_choice calls that function; parallel_tool_calls false gives exactly one call", async () => {
  for (const name of NAMED) {
    // get_weather's shortest call is ~125 tokens of kjv-13m's (one per byte at worst).
    const r = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 200, seed: 7,
      temperature: 1, tool_choice: { type: "function", function: { name } }, parallel_tool_calls: false });
    checkCalls(r.choices[0].message.tool_calls, [name]);
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    const { calls } = await accumulate(await client.chat.completions.create({ messages, tools: TOOLS,
      max_tokens: 200, seed: 8, temperature: 1, stream: true, parallel_tool_calls: false,
      tool_choice: { type: "function", function: { name } } }));
    checkCalls(calls, [name]);
    assert.equal(calls.length, 1);
  }
});

test("the stream's accumulated tool_calls equal the non-streamed answer for the same seed", async () => {
  for (const seed of SEEDS) {
    const req = { messages, tools: TOOLS, tool_choice: "required", max_tokens: 120, seed, temperature: 0 };
    const whole = (await client.chat.completions.create(req)).choices[0].message.tool_calls;
    const { calls } = await accumulate(await client.chat.completions.create({ ...req, stream: true }));
    const strip = (cs) => cs.map((c) => ({ type: c.type, name: c.function.name, arguments: c.function.arguments }));
    assert.deepEqual(strip(calls), strip(whole));
  }
});

test("max_tokens too small for any call: finish_reason length and the partial text, not an error", async () => {
  const r = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: "required",
    max_tokens: 8, seed: 1 });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.ok(r.choices[0].message.content.startsWith("<tool_call>"), r.choices[0].message.content);
});

test("a <think> block and a call: reasoning_content and tool_calls, streamed and not", async () => {
  // A GBNF grammar makes kjv-13m write what Qwen3 writes; tool_choice auto parses the call.
  const grammar = 'root ::= "<think>\\n" [a-z ]{3,12} "\\n</think>\\n\\n" "<tool_call>\\n{\\"name\\": ' +
    '\\"search\\", \\"arguments\\": {\\"terms\\": [\\"" [a-z]{1,6} "\\"]}}\\n</tool_call>"';
  const req = { messages, tools: TOOLS, max_tokens: 120, seed: 3, temperature: 0, grammar };
  const r = await postJson(`${srv.base}/v1/chat/completions`, req);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const m = r.body.choices[0].message;
  assert.match(m.reasoning_content, /^[a-z ]{3,12}$/);
  assert.equal(m.content, null);
  checkCalls(m.tool_calls, ["search"]);
  assert.equal(r.body.choices[0].finish_reason, "tool_calls");
  const { calls, finish, content } = await accumulate(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(finish, "tool_calls");
  assert.equal(content.trim(), "");
  assert.deepEqual(calls.map((c) => c.function), m.tool_calls.map((c) => c.function));
  // tool_choice none: the same text stays content (after the reasoning), no calls.
  const none = await postJson(`${srv.base}/v1/chat/completions`, { ...req, tool_choice: "none" });
  assert.equal(none.body.choices[0].message.tool_calls, undefined);
  assert.match(none.body.choices[0].message.content, /^<tool_call>/);
});

test("tool_choice auto and none: the template sees the tools, plain text stays content", async () => {
  const plain = await client.chat.completions.create({ messages, max_tokens: 8, seed: 1 });
  for (const tool_choice of ["auto", "none"]) {
    const r = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice, max_tokens: 8, seed: 1 });
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.notEqual(r.choices[0].finish_reason, "tool_calls");
    assert.equal(typeof r.choices[0].message.content, "string");
    // The tools are rendered into the prompt (Qwen2.5 lists them in the system turn).
    assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, `${r.usage.prompt_tokens}`);
  }
});

test("a conversation with an assistant's tool_calls (content null) and the tool's result", async () => {
  const history = [
    ...messages,
    { role: "assistant", content: null, tool_calls: [{ id: "call_abc", type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius","where":{"country":"FR","days":3}}' } }] },
    { role: "tool", tool_call_id: "call_abc", content: '{"temperature": 18}' },
  ];
  const short = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 4, seed: 1 });
  const r = await client.chat.completions.create({ messages: history, tools: TOOLS, max_tokens: 4, seed: 1 });
  assert.equal(r.choices[0].message.role, "assistant");
  // The call and its result are in the prompt: <tool_call>...</tool_call> and <tool_response>.
  assert.ok(r.usage.prompt_tokens > short.usage.prompt_tokens + 30, `${r.usage.prompt_tokens}`);
});

// Published templates of every family: a history with an OpenAI-shaped call (null content, a
// long call id, arguments as text) and its result must render (templates disagree on all three:
// the server tries the shapes in tool-calls-api.h), and a required call comes back parsed in the
// family's own syntax.
const FAMILY_TEMPLATES = SANITIZED
  ? ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "mistralai-Mistral-Nemo-Instruct-2407"]
  : ["meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
     "Mistral-Small-3.2-24B-Instruct-2506", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
     "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2",
     "fireworks-ai-llama-3-firefunction-v2", "Qwen-Qwen3-0.6B", "microsoft-phi-4"];
test("every family's published template: tool history renders, a required call is parsed", async () => {
  const history = [
    ...messages,
    { role: "assistant", content: null, tool_calls: [{ id: "call_xyzXYZ1234567890", type: "function",
      function: { name: "search", arguments: '{"terms":["Paris"]}' } }] },
    { role: "tool", tool_call_id: "call_xyzXYZ1234567890", content: "nothing found" },
  ];
  for (const name of FAMILY_TEMPLATES) {
    const s = await startServer(["--parallel", "1", "--ctx-size", "2048", "-t", "2",
                                 "--chat-template-file", `${FIXTURES}published/${name}.jinja`]);
    try {
      const r = await postJson(`${s.base}/v1/chat/completions`, { messages: history, tools: TOOLS,
        tool_choice: { type: "function", function: { name: "search" } }, parallel_tool_calls: false,
        max_tokens: 200, seed: 1, temperature: 1 });
      assert.equal(r.status, 200, `${name}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.choices[0].finish_reason, "tool_calls", `${name}: ${JSON.stringify(r.body)}`);
      checkCalls(r.body.choices[0].message.tool_calls, ["search"]);
    } finally {
      await stopCleanly(s);
    }
  }
});

test("bad tool fields are 400s in OpenAI's shape naming the field", async () => {
  const fn = (extra = {}) => ({ type: "function", function: { name: "f", parameters: { type: "object" }, ...extra } });
  const cases = [
    [{ tools: "f" }, "tools"],
    [{ tools: [{ type: "retrieval" }] }, "tools[0].type"],
    [{ tools: [{ type: "function" }] }, "tools[0].function"],
    [{ tools: [fn({ name: "has space" })] }, "tools[0].function.name"],
    [{ tools: [fn({ name: "x".repeat(65) })] }, "tools[0].function.name"],
    [{ tools: [fn(), fn()] }, "tools[1].function.name"],
    [{ tools: [fn({ parameters: "object" })] }, "tools[0].function.parameters"],
    [{ tools: [fn({ parameters: { type: "object", not: {} } })], tool_choice: "required" }, "tools"],
    [{ tools: [fn()], tool_choice: { type: "function", function: { name: "g" } } }, "tool_choice"],
    [{ tools: [fn()], tool_choice: "always" }, "tool_choice"],
    [{ tool_choice: "required" }, "tool_choice"],
    [{ tool_choice: { type: "function", function: { name: "f" } } }, "tool_choice"],
    [{ tools: [fn()], parallel_tool_calls: "yes" }, "parallel_tool_calls"],
    [{ tools: [fn()], tool_choice: "required", response_format: { type: "json_object" } }, "tool_choice"],
    [{ messages: [...messages, { role: "tool", content: "r" }] }, "messages[1].tool_call_id"],
    [{ messages: [...messages, { role: "assistant", content: null, tool_calls: [{ type: "function" }] }] },
     "messages[1].tool_calls[0].function"],
    [{ messages: [...messages, { role: "assistant", tool_calls: [{ function: { name: "f", arguments: "{oops" } }] }] },
     "messages[1].tool_calls[0].function.arguments"],
    [{ messages: [...messages, { role: "user", content: "x", tool_calls: [] }] }, "messages[1].tool_calls"],
  ];
  for (const [fields, param] of cases) {
    const r = await postJson(`${srv.base}/v1/chat/completions`, { messages, max_tokens: 1, ...fields });
    assert.equal(r.status, 400, `${JSON.stringify(fields)} -> ${r.status} ${JSON.stringify(r.body)}`);
    assertErrorShape(r.body, "invalid_request_error");
    assert.equal(r.body.error.param, param, JSON.stringify(r.body));
  }
  const legacy = await postJson(`${srv.base}/v1/completions`, { prompt: "x", tools: [fn()] });
  assert.equal(legacy.status, 400);
  assert.equal(legacy.body.error.param, "tools");
});

test("Ollama /api/chat: tools reach the template; calls come back with object arguments", async () => {
  // A template without call syntax: the generic family reads a bare {"name", "arguments"} object,
  // which Ollama's `format` (a JSON Schema) makes kjv-13m write.
  const plain = await startServer(["--parallel", "2", "--ctx-size", "1024", "-t", "2",
                                   "--chat-template-file", PLAIN_TEMPLATE]);
  try {
    const ollama = new Ollama({ host: plain.base });
    const callSchema = { type: "object", properties: { name: { const: "search" }, arguments: FUNCTIONS.search },
                         required: ["name", "arguments"], additionalProperties: false };
    const req = { model: "kjv", messages, tools: TOOLS, format: callSchema, options: { num_predict: 120, seed: 5 } };
    const r = await ollama.chat({ ...req, stream: false });
    assert.equal(r.message.tool_calls.length, 1, JSON.stringify(r.message));
    const call = r.message.tool_calls[0];
    assert.equal(call.function.name, "search");
    assert.equal(typeof call.function.arguments, "object");
    assert.equal(validate(FUNCTIONS.search, call.function.arguments, FUNCTIONS.search), "");
    assert.equal(r.message.content, "");
    const parts = [];
    for await (const part of await ollama.chat({ ...req, stream: true })) parts.push(part);
    const streamed = parts.flatMap((p) => p.message?.tool_calls ?? []);
    assert.deepEqual(streamed, r.message.tool_calls);
    assert.equal(parts.map((p) => p.message?.content ?? "").join(""), "");
    assert.equal(parts.at(-1).done, true);
    // History with Ollama's shapes: tool_calls with object arguments, a tool turn with tool_name.
    const history = [...messages, { role: "assistant", content: "", tool_calls: r.message.tool_calls },
                     { role: "tool", tool_name: "search", content: "nothing found" }];
    const next = await ollama.chat({ model: "kjv", messages: history, tools: TOOLS, stream: false,
                                     options: { num_predict: 4 } });
    assert.equal(next.message.role, "assistant");
  } finally {
    await stopCleanly(plain);
  }
  // On the Hermes-template server tools without format: plain text, no calls, through Ollama too.
  const ollama = new Ollama({ host: srv.base });
  const r = await ollama.chat({ model: "kjv", messages, tools: TOOLS, stream: false, options: { num_predict: 6 } });
  assert.equal(r.message.tool_calls, undefined);
  assert.equal(typeof r.message.content, "string");
});
