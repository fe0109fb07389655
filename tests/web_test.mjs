// The web page of a running inflight-server in headless Chromium (Debian's chromium, npm
// playwright-core): a prompt typed in the playground streams its answer; a load started with
// inflight-bench moves the dashboard's running count and tokens/s; the window group's KV card
// and chart stay hidden (the demo model has no sliding-window layers); no console errors.
// With --window-group (a server whose model has sliding-window layers): the dashboard shows
// the window group's card and chart beside the full group's, each named.
// With --agents (a server whose model has Qwen3's template): the playground shows a forced
// tool call as a call, sends the typed tool result back for the answer, and shows reasoning
// (forced with a guide through "more request fields") folded apart from the answer.
// Usage: node web_test.mjs BASE_URL BENCH_BINARY MODEL_FILE SCREENSHOT_DIR
//        node web_test.mjs --window-group BASE_URL SCREENSHOT_DIR
//        node web_test.mjs --agents BASE_URL SCREENSHOT_DIR
// Run by tests/openai_test.cc; exits non-zero with a message on the first failed check.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../tools/oracle/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const windowGroup = process.argv[2] === "--window-group";
const agents = process.argv[2] === "--agents";
const [base, bench, model, shots] =
    windowGroup || agents ? [process.argv[3], "", "", process.argv[4]] : process.argv.slice(2);
mkdirSync(shots, { recursive: true });

const launch = () => chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const card = (k) => `[data-model="tensorrt_llm"] [data-card="${k}"]`;
const label = (k) => `[data-model="tensorrt_llm"] [data-label="${k}"]`;

async function main() {
  const browser = await launch();
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(base + "/");
    await page.waitForFunction(() => [...document.querySelectorAll("#model option")].some((o) => o.value === "ensemble"));

    // Playground: a chat turn, streamed, greedy.
    await page.selectOption("#mode", "chat");
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "40");
    await page.fill("#prompt", "Tell me a story about a cat.");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelector("#chat-log .assistant > span")?.textContent.length > 0, null, { timeout: 30000 });
    await page.waitForFunction(() => /completion \d+ tokens/.test(document.querySelector("#stats").textContent), null, { timeout: 30000 });
    const answer = await page.$eval("#chat-log .assistant > span", (e) => e.textContent);
    const stats = await page.textContent("#stats");
    assert.ok(answer.trim().length > 0, "no streamed text");
    // A rate shows even when a short answer arrives in one network read.
    const rate = /([\d.]+) tokens\/s/.exec(stats);
    assert.ok(rate && +rate[1] > 0, `no tokens/s in "${stats}"`);
    await page.screenshot({ path: `${shots}/playground.png`, fullPage: true });

    // The same answer as the API gives for the same greedy request.
    const r = await fetch(base + "/v1/chat/completions", {
      method: "POST",
      body: JSON.stringify({ model: "ensemble", messages: [{ role: "user", content: "Tell me a story about a cat." }], max_tokens: 40, temperature: 0, top_p: 1 }),
    });
    assert.equal((await r.json()).choices[0].message.content, answer);

    // Dashboard: idle, then under load from inflight-bench.
    await page.click("#tab-dash");
    await page.waitForSelector('[data-model="tensorrt_llm"] .v[data-k="running"]');
    const value = (k) => page.$eval(`[data-model="tensorrt_llm"] .v[data-k="${k}"]`, (e) => e.textContent);
    // No sliding-window layers: one group of KV blocks, not called "full-attention".
    await page.waitForFunction((sel) => /^\d+ \/ \d+$/.test(document.querySelector(sel).textContent), '[data-model="tensorrt_llm"] .v[data-k="kv"]');
    assert.ok(!(await page.isVisible(card("wkv"))), "the window group's card shows for a model without one");
    assert.ok(!(await page.isVisible(card("wkvchart"))), "the window group's chart shows for a model without one");
    assert.match(await page.textContent(label("kv")), /^KV blocks used \/ total( \(\d+%\))?$/);
    const port = new URL(base).port;
    // Long enough (~80k tokens, seconds even on a fast build of the small demo model) for the
    // dashboard's twice-a-second events to catch requests running: 48 x 200 tokens ended
    // between two events once the kernels got faster.
    const kLoadRequests = 200;
    const load = spawn(bench, ["-i", "openai", "--url", `127.0.0.1:${port}`, "--tokenizer", model, "-n", String(kLoadRequests), "--concurrency", "16",
                               "--no-progress", "token-norm-dist", "--input-mean", "64", "--output-mean", "400"], { stdio: "ignore" });
    const benchDone = new Promise((resolve) => load.on("exit", (code) => resolve(code)));
    let maxRunning = 0, maxTps = 0, budgetedSteps = 0;
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline && (maxRunning === 0 || maxTps === 0 || budgetedSteps === 0)) {
      maxRunning = Math.max(maxRunning, +(await value("running")));
      maxTps = Math.max(maxTps, +(await value("tps")));
      // Prompts joining running decodes are budgeted (the auto latency target): the steps say so.
      const snap = await (await fetch(base + "/inflight/snapshot")).json();
      const m = snap.models.find((x) => x.model === "tensorrt_llm");
      budgetedSteps += m.steps.filter((st) => st.latency_target_ms > 0).length;
      await new Promise((res) => setTimeout(res, 100));
    }
    await page.screenshot({ path: `${shots}/dashboard.png`, fullPage: true });
    assert.ok(maxRunning > 0, "the running count never moved");
    assert.ok(maxTps > 0, "tokens/s never moved");
    assert.equal(await benchDone, 0, "inflight-bench failed");
    // After the load the finished count shows it, and the time-to-first-token histogram filled.
    await page.waitForFunction((n) => +document.querySelector('[data-model="tensorrt_llm"] .v[data-k="finished"]').textContent >= n, kLoadRequests, { timeout: 10000 });
    assert.ok(budgetedSteps > 0, "no step was budgeted to the latency target under load");
    // Every token's inter-token latency: its histogram filled and its percentiles shown.
    const after = (await (await fetch(base + "/inflight/snapshot")).json()).models.find((x) => x.model === "tensorrt_llm");
    const itlSamples = after.itl_counts.reduce((a, b) => a + b, 0);
    assert.ok(itlSamples > kLoadRequests, `inter-token latency samples: ${itlSamples}`);
    assert.ok(after.latency_ms.itl_p50 > 0 && after.latency_ms.itl_p99 >= after.latency_ms.itl_p50, JSON.stringify(after.latency_ms));
    assert.ok(after.latency_ms.ttft_p99 >= after.latency_ms.ttft_p50, JSON.stringify(after.latency_ms));
    await page.waitForFunction(() => /inter-token latency p50 \S+ m?s, p99 \S+ m?s/.test(document.querySelector('[data-model="tensorrt_llm"] .why.lat').textContent), null, { timeout: 5000 });
    assert.ok(await page.isVisible('[data-model="tensorrt_llm"] canvas[data-k="itl"]'), "the inter-token latency chart is hidden");
    assert.deepEqual(errors, [], "console errors");
    console.log(`web: all checks passed (max running ${maxRunning}, max tokens/s ${maxTps}, budgeted steps seen ${budgetedSteps})`);
  } finally {
    await browser.close();
  }
}

// The dashboard of a model with sliding-window layers: both groups' cards and charts, named,
// used <= total in each, the window group's total and window as the snapshot gives them.
async function windowGroupMain() {
  const snap = await (await fetch(base + "/inflight/snapshot")).json();
  const w = snap.models[0].window_kv_blocks;
  assert.ok(w && w.total > 0 && w.window > 0, `no window group in the snapshot: ${JSON.stringify(snap.models[0])}`);
  const browser = await launch();
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(base + "/#batcher");
    await page.waitForSelector(card("wkv"), { state: "visible", timeout: 10000 });
    assert.ok(await page.isVisible(card("wkvchart")), "the window group's chart is hidden");
    const usedTotal = async (k) => {
      const text = await page.textContent(`[data-model="tensorrt_llm"] .v[data-k="${k}"]`);
      const m = /^(\d+) \/ (\d+)$/.exec(text);
      assert.ok(m, `card ${k}: "${text}"`);
      assert.ok(+m[1] <= +m[2], `card ${k}: used over total in "${text}"`);
      return +m[2];
    };
    assert.ok((await usedTotal("kv")) > 0);
    assert.equal(await usedTotal("wkv"), w.total);
    assert.match(await page.textContent(label("kv")), /^KV blocks used \/ total \(\d+%\), full-attention layers$/);
    assert.match(await page.textContent(label("kvchart")), /, full-attention layers$/);
    const windowed = `, sliding-window layers (window ${w.window} tokens)`;
    assert.ok((await page.textContent(label("wkv"))).endsWith(windowed), await page.textContent(label("wkv")));
    assert.ok((await page.textContent(label("wkvchart"))).endsWith(windowed), await page.textContent(label("wkvchart")));
    await page.screenshot({ path: `${shots}/dashboard-window-group.png`, fullPage: true });
    assert.deepEqual(errors, [], "console errors");
    console.log(`web: window group checks passed (${w.total} window blocks, window ${w.window} tokens)`);
  } finally {
    await browser.close();
  }
}

async function agentsMain() {
  const browser = await launch();
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(base + "/");
    await page.waitForFunction(() => [...document.querySelectorAll("#model option")].some((o) => o.value === "ensemble"));
    await page.selectOption("#mode", "chat");
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "80");
    // A forced call shows as the function's name and its arguments.
    await page.fill("#tools", JSON.stringify([{ type: "function", function: { name: "get_weather", parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } }]));
    await page.fill("#tool-choice", "get_weather");
    await page.fill("#prompt", "Weather in Paris?");
    await page.click("#send");
    await page.waitForSelector("#chat-log .assistant .toolcall", { timeout: 30000 });
    await page.waitForFunction(() => /finish: tool_calls/.test(document.querySelector("#stats").textContent), null, { timeout: 30000 });
    const call = await page.textContent("#chat-log .assistant .toolcall");
    const m = /^get_weather\((.*)\)$/s.exec(call);
    assert.ok(m, `the call shows as get_weather(...): "${call}"`);
    assert.equal(typeof JSON.parse(m[1]).city, "string");
    assert.match(await page.getAttribute("#prompt", "placeholder"), /tool result for get_weather/);
    // The typed result goes back as the tool's message; the model answers (no call forced now).
    await page.fill("#tool-choice", "none");
    await page.fill("#max-tokens", "6");
    await page.fill("#prompt", "21 C and clear");
    await page.click("#send");
    await page.waitForSelector("#chat-log .tool", { timeout: 30000 });
    await page.waitForFunction(() => document.querySelectorAll("#chat-log .assistant").length === 2 &&
        /finish: (stop|length)/.test(document.querySelector("#stats").textContent), null, { timeout: 30000 });
    await page.screenshot({ path: `${shots}/playground-tools.png`, fullPage: true });
    // Reasoning: folded apart from the answer, streamed and whole.
    for (const stream of ["1", "0"]) {
      await page.click("#clear");
      await page.selectOption("#stream", stream);
      await page.fill("#tools", "");
      await page.fill("#tool-choice", "");
      await page.fill("#max-tokens", "40");
      await page.fill("#extra", JSON.stringify({ guided_regex: "<think>\n[a-z]{3,10}\n</think>\n\n[a-z]{2,6}" }));
      await page.fill("#prompt", "2+2?");
      await page.click("#send");
      await page.waitForFunction(() => /completion \d+ tokens/.test(document.querySelector("#stats").textContent), null, { timeout: 30000 });
      const reasoning = await page.textContent("#chat-log .assistant details.reasoning pre");
      assert.match(reasoning, /^\n[a-z]{3,10}\n$/, `reasoning shown apart: "${reasoning}"`);
      const answer = await page.$eval("#chat-log .assistant > span", (e) => e.textContent);
      assert.match(answer, /^[a-z]{2,6}$/, `the answer alone: "${answer}"`);
    }
    await page.screenshot({ path: `${shots}/playground-reasoning.png`, fullPage: true });
    // Bad JSON in the tools field is a clear message, not a request.
    await page.fill("#tools", "[{");
    await page.fill("#prompt", "hi");
    await page.click("#send");
    await page.waitForFunction(() => /tools \/ more fields/.test(document.querySelector("#stats").textContent));
    assert.deepEqual(errors, [], "console errors");
    console.log("web: agent playground checks passed");
  } finally {
    await browser.close();
  }
}

(windowGroup ? windowGroupMain() : agents ? agentsMain() : main()).catch((e) => {
  console.error("web check failed:", e);
  process.exit(1);
});
