// The real chat templates of model families that ship no tokenizer_config.json on npm, for
// tests/jinja_test.cc. Usage: node chat_templates.mjs > OUT_JSON ({"name": template, ...}).
//
// @huggingface/ollama-utils keeps, for the models of Ollama's library, the chat template
// stored in each model's GGUF (tokenizer.chat_template, which llama.cpp's converter copies from
// the model's tokenizer_config.json) in src/chat-template-automap.ts; the package does not
// export that table, so it is read from the source file (a TypeScript array literal).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FAMILIES = {
  "gemma2": "library/gemma2:2b", // Gemma 2 (2B/9B/27B instruct)
  "phi3-mini": "library/phi3:3.8b", // Phi-3-mini
  "phi3-medium": "library/phi3:14b", // Phi-3-medium
  "phi3.5-mini": "library/phi3.5:3.8b", // Phi-3.5-mini
  "phi4-mini": "library/phi4-mini:3.8b", // Phi-4-mini
  "mixtral-8x7b": "library/mixtral:8x7b", // Mixtral-8x7B-Instruct
  "mixtral-8x22b": "library/mixtral:8x22b", // Mixtral-8x22B-Instruct
  "mistral-7b": "library/mistral:7b-instruct-fp16", // Mistral-7B-Instruct
};

const pkg = join(dirname(fileURLToPath(import.meta.url)), "node_modules/@huggingface/ollama-utils");
const source = readFileSync(join(pkg, "src/chat-template-automap.ts"), "utf8");
const start = source.indexOf("[", source.indexOf("OLLAMA_CHAT_TEMPLATE_MAPPING"));
const table = new Function(`return ${source.slice(start).replace(/;\s*$/, "")};`)();
const out = {};
for (const [name, model] of Object.entries(FAMILIES)) {
  const entry = table.find((e) => e.model === model);
  if (!entry) throw new Error(`${model} is not in @huggingface/ollama-utils`);
  out[name] = entry.gguf;
}
process.stdout.write(JSON.stringify(out));
