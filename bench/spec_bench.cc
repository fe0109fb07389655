// spec_bench: single-stream greedy decode with speculative decoding (prompt lookup, or with
// --draft-layers N a draft model made of the target's first N layers) against without, A/B
// interleaved in one run, after a realistic prompt.
//   repetitive  the prompt is a passage of the model's own text said over and over up to
//               --prompt-tokens and cut mid-passage (as in editing code or quoting a document:
//               the answer repeats what the prompt holds)
//   plain       a prompt of the model's own text with no repetition (what speculation costs
//               when the drafts rarely come true)
// How often drafts come true depends on the model. A random-weight model's text is not
// predictable; --block-output-scale 0 writes the same shapes with every block's output
// projections zero, a model whose next token is a function of the current one (a bigram
// chain) at the full cost of the real model: the upper bound, where drafts nearly always hold.
// Every run's output must equal the run without speculation (greedy is exact), else exit 1.
// Usage: spec_bench [--model PATH | --preset tinyllama-1.1b --dtype q4_k_m] [--prompt-tokens 512]
//                   [--decode-tokens 128] [--draft 4] [--ngram 3] [--draft-layers 0] [--passage 80]
//                   [--reps 3]
//                   [--block-output-scale 1] [--threads 2] [--tokenizer PATH] [--model-dir DIR]
//                   [--mode lookahead --lookahead W,N,G | --mode medusa --medusa-heads 4 |
//                    --mode eagle [--eagle-choices JSON] [--eagle-version 3|1]
//                                 [--eagle-dynamic K,L (EAGLE-2's tree: top-k, levels;
//                                                      --draft nodes)]]
//                   [--adaptive 0|1] [--batch 16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_models.h"
#include "engine/executor.h"
#include "model/eagle.h"
#include "model/medusa.h"

using namespace inflight;

namespace {

struct Run {
  std::vector<int32_t> output;
  double decode_tps = 0;  // tokens after the first over the time since the first
  double total_s = 0;
  int32_t drafts = 0, accepted = 0;
};

// `batch` copies of the request at once (each its own sequence: prefix reuse is off), after
// their prompts: decode_tps is the batch's tokens after each one's first over the time from
// the last first token to the last token (the decode phase all of them share).
Run RunOne(const Model& model, const ExecutorConfig& config, const std::vector<int32_t>& prompt,
           int32_t max_tokens, const Model* draft = nullptr, int batch = 1) {
  auto e = Executor::Create(model, config, draft);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  Request r;
  r.prompt_ids = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.exclude_input_in_output = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RequestId> ids;
  for (int i = 0; i < batch; ++i) {
    auto id = (*e)->Enqueue(r);
    if (!id.ok()) {
      std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
      std::exit(1);
    }
    ids.push_back(*id);
  }
  Run out;
  Clock::time_point last_first{}, last_token{};
  int64_t tokens = 0;
  for (RequestId id : ids) {
    for (bool done = false; !done;) {
      for (Result& res : (*e)->AwaitResponses(id, std::chrono::milliseconds(1000))) {
        if (!res.is_final) continue;
        done = true;
        if (out.output.empty()) out.output = res.output_token_ids;
        if (res.output_token_ids != out.output) {
          std::fprintf(stderr, "batched copies of one greedy request differ\n");
          std::exit(1);
        }
        out.drafts += res.stats.num_draft_tokens;
        out.accepted += res.stats.num_accepted_draft_tokens;
        tokens += res.stats.num_generated_tokens - 1;
        last_first = std::max(last_first, res.stats.first_token_time);
        last_token = std::max(last_token, res.stats.last_token_time);
      }
    }
  }
  out.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One request: its own decode phase; a batch: the shared phase after every first token.
  const double span = std::chrono::duration<double>(last_token - last_first).count();
  out.decode_tps = batch == 1 ? tokens / span : tokens * (span > 0 ? 1.0 : 0.0) / span;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, preset = "tinyllama-1.1b", dtype = "q4_k_m", model_dir = "bench-models";
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  double block_output_scale = 1.0;
  int draft_layers = 0, batch = 1, medusa_heads = 4;
  bool adaptive = true;
  std::string mode;  // prompt_lookup (default), draft_model (with --draft-layers), lookahead
  std::string eagle_choices;
  int eagle_version = 3;
  int eagle_dynamic_k = 0, eagle_layers = 4;
  LookaheadConfig lookahead = ExecutorConfig{}.lookahead;
  int prompt_tokens = 512, decode_tokens = 128, draft_len = 4, ngram = 3, passage = 80, reps = 3,
      threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--model")
      model_path = v;
    else if (f == "--preset")
      preset = v;
    else if (f == "--dtype")
      dtype = v;
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--prompt-tokens")
      prompt_tokens = std::stoi(v);
    else if (f == "--decode-tokens")
      decode_tokens = std::stoi(v);
    else if (f == "--draft")
      draft_len = std::stoi(v);
    else if (f == "--ngram")
      ngram = std::stoi(v);
    else if (f == "--passage")
      passage = std::stoi(v);
    else if (f == "--reps")
      reps = std::stoi(v);
    else if (f == "--block-output-scale")
      block_output_scale = std::stod(v);
    else if (f == "--draft-layers")
      draft_layers = std::stoi(v);
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--mode")
      mode = v;
    else if (f == "--lookahead")
      std::sscanf(v.c_str(), "%d,%d,%d", &lookahead.window, &lookahead.ngram,
                  &lookahead.verification_set);
    else if (f == "--batch")
      batch = std::stoi(v);
    else if (f == "--adaptive")
      adaptive = std::stoi(v) != 0;
    else if (f == "--medusa-heads")
      medusa_heads = std::stoi(v);
    else if (f == "--eagle-choices")
      eagle_choices = v;
    else if (f == "--eagle-version")
      eagle_version = std::stoi(v);
    else if (f == "--eagle-dynamic")
      std::sscanf(v.c_str(), "%d,%d", &eagle_dynamic_k, &eagle_layers);
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  StatusOr<std::unique_ptr<Model>> model =
      !model_path.empty() ? Model::Load(model_path)
      : block_output_scale == 1.0
          ? LoadOrWriteRandomModel(model_dir + "/" + preset + "-random-" + dtype + ".gguf", preset,
                                   dtype, tokenizer)
          : LoadOrWriteRandomModel(model_dir + "/" + preset + "-random-" + dtype + "-blockscale" +
                                       std::to_string(block_output_scale) + ".gguf",
                                   preset, dtype, tokenizer, 0,
                                   static_cast<float>(block_output_scale));
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const Model& m = **model;
  const int32_t context = m.config().context_length;
  prompt_tokens = std::min(prompt_tokens, context - decode_tokens - 1);
  ExecutorConfig plain;
  plain.num_threads = threads;
  plain.max_num_tokens = 2048;
  plain.max_tokens_in_paged_kv_cache = 4096;
  plain.enable_chunked_context = true;
  ExecutorConfig spec = plain;
  spec.speculative_mode =
      draft_layers > 0 ? SpeculativeMode::kDraftModel : SpeculativeMode::kPromptLookup;
  if (mode == "lookahead") spec.speculative_mode = SpeculativeMode::kLookahead;
  if (mode == "medusa") {
    // Heads written for this model: on a predictable model (block outputs scaled down) each
    // head's projection is the model's own, which guesses right where its text repeats a token;
    // on the random model random heads (what Medusa costs when its guesses fail).
    spec.speculative_mode = SpeculativeMode::kMedusa;
    const std::string dir = model_dir + "/medusa-" + std::to_string(medusa_heads) + "-" +
                            (block_output_scale == 1.0 ? "random" : "copied") + "-" +
                            std::to_string(m.config().hidden_size);
    ThreadPool pool(threads);
    Status st = WriteMedusaHeads(dir, m, medusa_heads, block_output_scale != 1.0, pool);
    auto heads =
        st.ok() ? MedusaHeads::Load(dir, m.config()) : StatusOr<std::unique_ptr<MedusaHeads>>(st);
    if (!heads.ok()) {
      std::fprintf(stderr, "%s\n", heads.status().ToString().c_str());
      return 1;
    }
    spec.medusa_heads = std::shared_ptr<MedusaHeads>(std::move(heads).value());
  }
  if (mode == "eagle") {
    // An EAGLE-3 (or EAGLE-1/2) head of the real shapes written for this model: on a
    // predictable model
    // (block outputs scaled down) one whose guesses follow the model's bigram chain (right at
    // every depth: the upper bound, as for Medusa), on the random model a random one (what
    // EAGLE costs when its guesses fail).
    spec.speculative_mode = SpeculativeMode::kEagle;
    const bool bigram = block_output_scale != 1.0;
    const std::string dir = model_dir + "/eagle" + std::to_string(eagle_version) + "-" +
                            (bigram ? "bigram" : "random") + "-" +
                            std::to_string(m.config().hidden_size);
    ThreadPool pool(threads);
    Status st = WriteEagleHead(dir, m, bigram, pool, {}, eagle_version);
    auto head = st.ok() ? EagleHead::Load(dir, m) : StatusOr<std::unique_ptr<EagleHead>>(st);
    if (!head.ok()) {
      std::fprintf(stderr, "%s\n", head.status().ToString().c_str());
      return 1;
    }
    spec.eagle_head = std::shared_ptr<EagleHead>(std::move(head).value());
    if (!eagle_choices.empty()) {
      auto paths = ParseMedusaChoices(eagle_choices, kMaxEagleChoicesDepth, kMaxLookaheadDrafts,
                                      "eagle_choices");
      if (!paths.ok()) {
        std::fprintf(stderr, "%s\n", paths.status().ToString().c_str());
        return 2;
      }
      spec.eagle_choices = *paths;
    }
    if (eagle_dynamic_k > 0) {
      spec.eagle_dynamic_tree = true;
      spec.eagle_dynamic_tree_max_top_k = eagle_dynamic_k;
      spec.eagle_num_layers = eagle_layers;
    }
  }
  spec.lookahead = lookahead;
  spec.adaptive_draft_length = adaptive;
  plain.max_batch_size = spec.max_batch_size = std::max(batch, 1);
  plain.max_tokens_in_paged_kv_cache = spec.max_tokens_in_paged_kv_cache =
      static_cast<int64_t>(std::max(batch, 1)) * (prompt_tokens + decode_tokens + 64) + 4096;
  // The draft model: the target's own first layers (with its embeddings and output head).
  std::unique_ptr<Model> draft;
  if (draft_layers > 0) {
    auto d = Model::Load(m.path(), {.num_layers = draft_layers});
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.status().ToString().c_str());
      return 1;
    }
    draft = std::move(d).value();
  }
  spec.max_draft_tokens = draft_len;
  spec.prompt_lookup_ngram = ngram;

  // The model's own text: its greedy continuation of BOS (id 1).
  const std::vector<int32_t> seed = {1};
  const int32_t own_len = std::max(passage, prompt_tokens - 1);
  std::vector<int32_t> own = RunOne(m, plain, seed, own_len).output;
  std::vector<int32_t> text_prompt = seed;
  text_prompt.insert(text_prompt.end(), own.begin(), own.end());
  text_prompt.resize(prompt_tokens);
  std::vector<int32_t> repeated = seed;
  while (static_cast<int>(repeated.size()) < prompt_tokens)
    repeated.insert(repeated.end(), own.begin(), own.begin() + passage);
  repeated.resize(prompt_tokens);

  std::printf(
      "model %s, %d threads; prompt %d tokens, %d decoded, up to %d drafts, passage %d tokens\n",
      m.Describe().c_str(), threads, prompt_tokens, decode_tokens, draft_len, passage);
  if (draft) {
    std::printf(
        "drafts from a draft model: the first %d layers (%.2f GB read per token against %.2f)\n",
        draft_layers, draft->DecodeWeightBytes() / 1e9, m.DecodeWeightBytes() / 1e9);
  } else if (spec.speculative_mode == SpeculativeMode::kLookahead) {
    std::printf(
        "drafts from lookahead decoding (window %d, n-gram %d, verification set %d)%s, "
        "batch %d\n",
        lookahead.window, lookahead.ngram, lookahead.verification_set,
        adaptive ? "" : " every step", batch);
  } else if (spec.speculative_mode == SpeculativeMode::kMedusa) {
    std::printf("drafts from %d Medusa heads (%s, %.2f GB read per step as q8_0)%s, batch %d\n",
                medusa_heads, block_output_scale != 1.0 ? "the model's own projection" : "random",
                spec.medusa_heads->WeightBytes() / 1e9, adaptive ? "" : " every step", batch);
  } else if (spec.speculative_mode == SpeculativeMode::kEagle) {
    const EagleHead& h = *spec.eagle_head;
    std::printf(
        "drafts from an EAGLE-%s head (%s; %.2f GB of layer as q8_0 and %.2f GB of vocabulary "
        "projection read per pass)%s%s, batch %d\n",
        h.version() == 1 ? "1/2" : "3",
        block_output_scale != 1.0 ? "guessing the model's bigram chain" : "random",
        h.LayerBytes() / 1e9, h.OutputBytes() / 1e9, adaptive ? "" : " every step",
        spec.eagle_dynamic_tree
            ? (", a dynamic tree (top-" + std::to_string(spec.eagle_dynamic_tree_max_top_k) + ", " +
               std::to_string(spec.eagle_num_layers) + " levels, " +
               std::to_string(spec.max_draft_tokens) + " nodes)")
                  .c_str()
            : "",
        batch);
  } else {
    std::printf("drafts from prompt lookup (n-gram <= %d)\n", ngram);
  }
  std::printf("%-11s %-4s %14s %14s %8s %12s %10s %12s\n", "workload", "rep", "plain tok/s",
              "spec tok/s", "speedup", "drafts/step", "accepted", "tokens/step");
  for (const auto& [name, prompt] :
       {std::pair<const char*, const std::vector<int32_t>&>{"repetitive", repeated},
        std::pair<const char*, const std::vector<int32_t>&>{"plain", text_prompt}}) {
    double best_plain = 0, best_spec = 0;
    for (int r = 0; r < reps; ++r) {
      // A then B, then B then A: neither always runs on a warmer machine.
      Run a, b;
      if (r % 2 == 0) {
        a = RunOne(m, plain, prompt, decode_tokens, nullptr, batch);
        b = RunOne(m, spec, prompt, decode_tokens, draft.get(), batch);
      } else {
        b = RunOne(m, spec, prompt, decode_tokens, draft.get(), batch);
        a = RunOne(m, plain, prompt, decode_tokens, nullptr, batch);
      }
      if (a.output != b.output) {
        std::fprintf(stderr, "%s: speculative output differs from the plain output\n", name);
        return 1;
      }
      // Steps after the first token: each gives one token plus its accepted drafts.
      const double steps = (decode_tokens - 1) - static_cast<double>(b.accepted) / batch;
      std::printf("%-11s %-4d %14.2f %14.2f %7.2fx %12.2f %9.0f%% %12.2f\n", name, r, a.decode_tps,
                  b.decode_tps, b.decode_tps / a.decode_tps,
                  steps > 0 ? static_cast<double>(b.drafts) / batch / steps : 0.0,
                  b.drafts ? 100.0 * b.accepted / b.drafts : 0.0,
                  steps > 0 ? (decode_tokens - 1) / steps : 0.0);
      std::fflush(stdout);
      best_plain = std::max(best_plain, a.decode_tps);
      best_spec = std::max(best_spec, b.decode_tps);
    }
    std::printf("%-11s best %14.2f %14.2f %7.2fx\n", name, best_plain, best_spec,
                best_spec / best_plain);
  }
  return 0;
}
