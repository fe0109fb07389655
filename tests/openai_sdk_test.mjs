// The official OpenAI Node SDK (npm `openai`, installed in tools/oracle) against a running
// inflight-server on the demo model. Usage: node openai_sdk_test.mjs http://127.0.0.1:PORT
// Exits non-zero with a message on the first failed check. Run by tests/openai_test.cc.
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(new URL("../tools/oracle/package.json", import.meta.url));
const OpenAI = require("openai");

const base = process.argv[2];
const eos = process.argv[3];  // the demo model's EOS id: banned where a stream must run long
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const prompt = "Once upon a time";

// The KServe generate path of the same server: the reference for greedy outputs.
async function kserve(text, maxTokens) {
  const r = await fetch(`${base}/v2/models/ensemble/generate`, {
    method: "POST",
    body: JSON.stringify({ text_input: text, max_tokens: maxTokens, exclude_input_in_output: true }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).text_output;
}

async function main() {
  const models = await client.models.list();
  assert.ok(models.data.some((m) => m.id === "ensemble"), "models.list has the ensemble");

  // Completions, whole and streamed, equal the KServe path for a greedy request.
  const expected = await kserve(prompt, 24);
  const c = await client.completions.create({ model: "ensemble", prompt, max_tokens: 24, temperature: 0 });
  assert.equal(c.choices[0].text, expected);
  assert.equal(c.choices[0].finish_reason, c.usage.completion_tokens === 24 ? "length" : "stop");
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
  let streamed = "";
  let usage = null;
  const cs = await client.completions.create({
    model: "ensemble", prompt, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of cs) {
    for (const ch of chunk.choices) streamed += ch.text;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(streamed, expected);
  assert.deepEqual(usage, c.usage);

  // Chat, whole and streamed; n = 3 with a seed; logprobs; a stop string.
  const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a fox" }];
  const chat = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 20, temperature: 0 });
  const rendered = "You tell stories.\n\nUser: A story about a fox\nAssistant:";
  assert.equal(chat.choices[0].message.content, await kserve(rendered, 20));
  assert.equal(chat.choices[0].message.role, "assistant");
  let chatStreamed = "";
  const chatStream = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 20, temperature: 0, stream: true });
  for await (const chunk of chatStream) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(chatStreamed, chat.choices[0].message.content);

  const three = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 16, temperature: 1.5, seed: 11, n: 3 });
  assert.equal(three.choices.length, 3);
  assert.deepEqual(three.choices.map((x) => x.index), [0, 1, 2]);
  const again = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 16, temperature: 1.5, seed: 11, n: 3 });
  assert.deepEqual(again.choices.map((x) => x.message.content), three.choices.map((x) => x.message.content));

  const lp = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, lp.usage.completion_tokens);
  assert.ok(content.length > 0);
  assert.equal(content.map((e) => e.token).join(""), lp.choices[0].message.content);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.ok(e.logprob <= 0);
  }

  const full = chat.choices[0].message.content;
  const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 4);
  const stopped = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 20, temperature: 0, stop: [stop] });
  assert.equal(stopped.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, "stop");

  // Structured outputs: response_format json_schema and json_object (guided decoding).
  const schema = {
    type: "object",
    properties: { name: { type: "string", maxLength: 12 }, legs: { type: "integer", minimum: 0, maximum: 8 }, tame: { type: "boolean" } },
    required: ["name", "legs", "tame"],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const pet = await client.chat.completions.create({
      model: "ensemble", messages, max_tokens: 80, temperature: 0.8, seed,
      response_format: { type: "json_schema", json_schema: { name: "pet", schema, strict: true } },
    });
    assert.equal(pet.choices[0].finish_reason, "stop");
    const obj = JSON.parse(pet.choices[0].message.content);
    assert.deepEqual(Object.keys(obj), ["name", "legs", "tame"]);
    assert.ok(typeof obj.name === "string" && obj.name.length <= 12, pet.choices[0].message.content);
    assert.ok(Number.isInteger(obj.legs) && obj.legs >= 0 && obj.legs <= 8, pet.choices[0].message.content);
    assert.equal(typeof obj.tame, "boolean");
  }
  const anyJson = await client.chat.completions.create({ model: "ensemble", messages, max_tokens: 200, temperature: 0, response_format: { type: "json_object" } });
  if (anyJson.choices[0].finish_reason === "stop") {
    const v = JSON.parse(anyJson.choices[0].message.content);
    assert.ok(typeof v === "object" && v !== null);
  } else {
    assert.equal(anyJson.choices[0].finish_reason, "length");
  }
  await assert.rejects(
    client.chat.completions.create({ model: "ensemble", messages, response_format: { type: "yaml" } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format");

  // A stream the client aborts (the test then checks the KV blocks are free again).
  const controller = new AbortController();
  const long = await client.completions.create(
    { model: "ensemble", prompt, max_tokens: 400, temperature: 0, stream: true, logit_bias: { [eos]: -100 } },
    { signal: controller.signal });
  let seen = 0;
  let finished = false;
  try {
    for await (const chunk of long) {
      if (chunk.choices[0]?.finish_reason) finished = true;
      if (++seen === 3) {
        controller.abort();
        break;
      }
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", `abort raised ${e}`);
  }
  assert.equal(seen, 3);
  assert.ok(!finished, "the aborted stream finished");

  // Errors come back as the SDK's typed errors.
  await assert.rejects(client.completions.create({ model: "nope", prompt }), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.completions.create({ model: "ensemble", prompt, n: 0 }), (e) => e instanceof OpenAI.BadRequestError && e.param === "n");
  await assert.rejects(
    client.chat.completions.create({ model: "ensemble", messages: [{ role: "developer", content: "x" }] }),
    (e) => e instanceof OpenAI.BadRequestError && /not developer/.test(e.message));
  console.log("openai sdk: all checks passed");
}

main().catch((e) => {
  console.error("openai sdk check failed:", e);
  process.exit(1);
});
