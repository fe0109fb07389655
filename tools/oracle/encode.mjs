// Tokenizer oracle for inflight's tests: the JS port of Hugging Face tokenizers.
// Usage: node encode.mjs TOKENIZER_DIR CORPUS_JSON > OUT_JSON
// CORPUS_JSON is a JSON array of strings; the output is an array of id arrays
// (no special tokens added, added tokens in the text are matched).
import { readFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, corpusPath] = process.argv.slice(2);
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
});
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const out = corpus.map((text) => Array.from(tokenizer.encode(text, { add_special_tokens: false })));
process.stdout.write(JSON.stringify(out));
