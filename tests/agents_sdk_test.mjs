// Agent flows through official clients, unchanged, against a running inflight-server whose
// model has Qwen3's chat template (see openai_agents_test.cc): the npm `openai` SDK (chat tool
// calls whole and through its stream helper, a call -> tool result -> answer loop; the
// Responses API whole, streamed and chained with previous_response_id), LangChain's
// ChatOpenAI tool binding (@langchain/openai), whole and streamed, and the npm
// `@anthropic-ai/sdk` (messages whole and streamed, tool use and tool results, count_tokens).
// Usage: node agents_sdk_test.mjs http://127.0.0.1:PORT
// Exits non-zero with a message on the first failed check.
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(new URL("../tools/oracle/package.json", import.meta.url));
const OpenAI = require("openai");
const { ChatOpenAI } = require("@langchain/openai");
const Anthropic = require("@anthropic-ai/sdk");

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
    },
  },
};
const clock = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const forced = { type: "function", function: { name: "get_weather" } };

function checkWeatherArgs(text) {
  const args = JSON.parse(text);
  assert.equal(typeof args.city, "string");
  assert.ok(["celsius", "fahrenheit"].includes(args.unit), text);
  assert.deepEqual(Object.keys(args).sort(), ["city", "unit"]);
}

async function main() {
  // Whole.
  const whole = await client.chat.completions.create({
    model: "ensemble", messages, tools: [weather, clock], tool_choice: forced, max_tokens: 80, temperature: 0,
  });
  const choice = whole.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  checkWeatherArgs(call.function.arguments);

  // Streamed through the SDK's helper: the same call, assembled by the SDK from the deltas.
  const stream = client.beta.chat.completions.stream({
    model: "ensemble", messages, tools: [weather, clock], tool_choice: forced, max_tokens: 80, temperature: 0,
  });
  let deltas = 0;
  stream.on("chunk", (chunk) => {
    for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
      assert.equal(typeof t.index, "number", "every tool-call delta carries its index");
      deltas++;
    }
  });
  const streamed = await stream.finalChatCompletion();
  assert.ok(deltas > 1, "arguments streamed in fragments");
  assert.equal(streamed.choices[0].finish_reason, "tool_calls");
  assert.equal(streamed.choices[0].message.tool_calls[0].function.name, "get_weather");
  assert.equal(streamed.choices[0].message.tool_calls[0].function.arguments, call.function.arguments);

  // The loop: the call, its result, the answer.
  const answer = await client.chat.completions.create({
    model: "ensemble",
    messages: [...messages, choice.message, { role: "tool", tool_call_id: call.id, content: '{"temp": 21.5}' }],
    tools: [weather, clock], tool_choice: "none", max_tokens: 8, temperature: 0,
  });
  assert.equal(typeof answer.choices[0].message.content, "string");
  assert.ok(!answer.choices[0].message.tool_calls || answer.choices[0].message.tool_calls.length === 0);
  assert.ok(answer.usage.prompt_tokens > whole.usage.prompt_tokens, "the call and result are in the prompt");

  // A tool message answering no call is the client's error, named.
  await assert.rejects(
    client.chat.completions.create({
      model: "ensemble", messages: [...messages, { role: "tool", tool_call_id: "nope", content: "x" }], max_tokens: 4,
    }),
    (e) => e.status === 400 && e.param === "messages",
  );

  // LangChain's tool binding, whole and streamed.
  const lc = new ChatOpenAI({
    model: "ensemble", apiKey: "unused", temperature: 0, maxTokens: 80, maxRetries: 0,
    configuration: { baseURL: `${base}/v1` },
  });
  const bound = lc.bindTools([weather, clock], { tool_choice: "get_weather" });
  const msg = await bound.invoke("What is the weather in Paris?");
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, "get_weather");
  checkWeatherArgs(JSON.stringify(msg.tool_calls[0].args));
  let gathered;
  for await (const chunk of await bound.stream("What is the weather in Paris?")) {
    gathered = gathered === undefined ? chunk : gathered.concat(chunk);
  }
  assert.equal(gathered.tool_calls.length, 1);
  assert.equal(gathered.tool_calls[0].name, "get_weather");
  assert.deepEqual(gathered.tool_calls[0].args, msg.tool_calls[0].args);
  await responses();
  await anthropic();
  console.log("openai, langchain and anthropic agent flows: ok");
}

// The Responses API: a forced call, its output given back through previous_response_id, the
// stream helper assembling the same call, store: false.
async function responses() {
  const tools = [{ type: "function", ...weather.function }, { type: "function", ...clock.function }];
  const first = await client.responses.create({
    model: "ensemble", input: "What is the weather in Paris?", instructions: "Use tools.", tools,
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 80, temperature: 0,
  });
  assert.equal(first.status, "completed");
  const calls = first.output.filter((o) => o.type === "function_call");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, "get_weather");
  checkWeatherArgs(calls[0].arguments);

  const stream = client.responses.stream({
    model: "ensemble", input: "What is the weather in Paris?", instructions: "Use tools.", tools,
    tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 80, temperature: 0,
  });
  const types = new Set();
  stream.on("event", (e) => types.add(e.type));
  const streamed = await stream.finalResponse();
  for (const t of ["response.created", "response.output_item.added", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.output_item.done", "response.completed"]) {
    assert.ok(types.has(t), `the stream has ${t}`);
  }
  const streamedCall = streamed.output.find((o) => o.type === "function_call");
  assert.equal(streamedCall.arguments, calls[0].arguments);

  const second = await client.responses.create({
    model: "ensemble", previous_response_id: first.id, tools, max_output_tokens: 8, temperature: 0,
    input: [{ type: "function_call_output", call_id: calls[0].call_id, output: '{"temp": 21.5}' }],
  });
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.usage.input_tokens > first.usage.input_tokens, "the earlier turn is in the prompt");
  assert.equal(typeof second.output_text, "string");
  assert.equal((await client.responses.retrieve(second.id)).id, second.id);

  const unstored = await client.responses.create({ model: "ensemble", input: "hi", store: false, max_output_tokens: 4 });
  await assert.rejects(client.responses.retrieve(unstored.id), (e) => e.status === 404);
  await assert.rejects(
    client.responses.create({ model: "ensemble", input: "hi", previous_response_id: unstored.id, max_output_tokens: 4 }),
    (e) => e.status === 404 && e.param === "previous_response_id",
  );
}

// The Messages API through Anthropic's SDK.
async function anthropic() {
  const claude = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  const tools = [
    { name: "get_weather", description: "Weather for a city", input_schema: weather.function.parameters },
    { name: "get_time", input_schema: { type: "object", properties: {} } },
  ];
  const user = { role: "user", content: "What is the weather in Paris?" };
  const msg = await claude.messages.create({
    model: "ensemble", max_tokens: 80, temperature: 0, system: "Use tools.", messages: [user], tools,
    tool_choice: { type: "tool", name: "get_weather" },
  });
  assert.equal(msg.type, "message");
  assert.equal(msg.stop_reason, "tool_use");
  const use = msg.content.find((b) => b.type === "tool_use");
  assert.equal(use.name, "get_weather");
  checkWeatherArgs(JSON.stringify(use.input));

  const stream = claude.messages.stream({
    model: "ensemble", max_tokens: 80, temperature: 0, system: "Use tools.", messages: [user], tools,
    tool_choice: { type: "tool", name: "get_weather" },
  });
  const streamed = await stream.finalMessage();
  assert.equal(streamed.stop_reason, "tool_use");
  assert.deepEqual(streamed.content.find((b) => b.type === "tool_use").input, use.input);

  const answer = await claude.messages.create({
    model: "ensemble", max_tokens: 8, temperature: 0, tools,
    messages: [user, { role: "assistant", content: msg.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "21.5 C, clear" }] }],
  });
  assert.ok(answer.content.every((b) => b.type === "text"));
  assert.ok(answer.usage.input_tokens > msg.usage.input_tokens);

  const counted = await claude.messages.countTokens({ model: "ensemble", system: "Use tools.", messages: [user], tools });
  assert.equal(counted.input_tokens, msg.usage.input_tokens);
  await assert.rejects(
    claude.messages.create({ model: "ensemble", messages: [user] }),
    (e) => e.status === 400 && e.error?.error?.type === "invalid_request_error",
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
