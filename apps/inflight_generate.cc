// inflight-generate: load a model, generate from one prompt, stream the text, report speed.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "offline_batch.h"

using namespace inflight;

namespace {

StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return InvalidArgumentError("--prompt-ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) return InvalidArgumentError("--prompt-ids is empty");
  return ids;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "inflight-generate: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text with an inflight model"};
  std::string model_path, prompt, prompt_ids_text, kv_dtype_name = "f16";
  int max_tokens = 32, threads = DefaultNumThreads();
  bool json_out = false, no_special = false, ignore_eos = false;
  GenerateParams params;
  SamplingParams& sp = params.sampling;
  sp.temperature = 0.0f;
  app.add_option("--model,-m", model_path, "GGUF file, llama2.c .bin or Hugging Face folder")
      ->required();
  app.add_option("--prompt,-p", prompt, "Prompt text");
  app.add_option("--prompt-ids", prompt_ids_text, "Prompt token ids, comma separated");
  app.add_option("-n,--max-tokens", max_tokens, "Tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads,-t", threads, "Compute threads")->check(CLI::Range(1, 256));
  app.add_option("--temperature", sp.temperature, "0 = greedy");
  app.add_option("--top-k", sp.top_k);
  app.add_option("--top-p", sp.top_p);
  app.add_option("--min-p", sp.min_p);
  app.add_option("--repetition-penalty", sp.repetition_penalty);
  app.add_option("--presence-penalty", sp.presence_penalty);
  app.add_option("--frequency-penalty", sp.frequency_penalty);
  app.add_option("--seed", sp.seed);
  app.add_option("--logprobs", sp.num_top_logprobs, "Top-N log-probs per token in --json");
  app.add_option("--kv-dtype", kv_dtype_name, "f16, bf16, f32 or int8");
  app.add_flag("--ignore-eos", ignore_eos, "Keep generating after end-of-sequence");
  app.add_flag("--no-special", no_special, "Do not add BOS/EOS to the prompt");
  app.add_flag("--json", json_out, "Print one JSON object instead of streaming text");
  // Offline batch mode: many requests through the in-flight batching executor.
  OfflineOptions offline;
  std::string batching = "inflight", policy = "guaranteed_no_evict";
  int64_t kv_cache_tokens = 0;
  ExecutorConfig& ec = offline.executor;
  app.add_option(
      "--prompts-file", offline.prompts_file,
      "JSON lines: prompt or prompt_ids, max_tokens, sampling fields, arrival_ms; runs them all "
      "through the batching executor and prints one JSON line per request and a summary");
  app.add_option("--batching", batching, "inflight or static (with --prompts-file)");
  app.add_option("--steps-file", offline.steps_file,
                 "With --prompts-file: write every engine step's statistics there (JSON lines: "
                 "tokens, forward time, the latency budget's target and prediction, why waiting)");
  app.add_option("--policy", policy, "guaranteed_no_evict or max_utilization");
  app.add_option("--max-batch-size", ec.max_batch_size)->check(CLI::Range(1, 4096));
  app.add_option("--max-num-tokens", ec.max_num_tokens, "Token budget per step")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-cache-tokens", kv_cache_tokens,
                 "max_tokens_in_paged_kv_cache (0: by free memory)");
  app.add_option("--kv-cache-free-mem-fraction", ec.kv_cache_free_mem_fraction);
  app.add_option("--tokens-per-block", ec.tokens_per_block);
  app.add_option("--max-queue-size", ec.max_queue_size);
  app.add_flag("--chunked-context", ec.enable_chunked_context,
               "Split long prompts into block-aligned chunks");
  app.add_flag("--kv-reuse", ec.enable_kv_cache_reuse, "Reuse KV blocks of shared prompt prefixes");
  app.add_option("--max-inter-token-latency-ms", ec.max_inter_token_latency_ms,
                 "Target time between a running sequence's tokens while prompts arrive: prompt "
                 "tokens beside decode rows are budgeted to it (0: auto, twice the decode "
                 "step; -1: off)")
      ->check(CLI::Range(-1.0, 3.6e6));
  CLI11_PARSE(app, argc, argv);

  if (!offline.prompts_file.empty()) {
    auto b = BatchingStrategyFromName(batching);
    if (!b.ok()) return Fail(b.status());
    auto p = CapacityPolicyFromName(policy);
    if (!p.ok()) return Fail(p.status());
    auto kv = KvDtypeFromName(kv_dtype_name);
    if (!kv) return Fail(InvalidArgumentError("--kv-dtype must be f16, bf16, f32 or int8"));
    ec.batching = *b;
    ec.policy = *p;
    ec.kv_dtype = *kv;
    ec.max_tokens_in_paged_kv_cache = kv_cache_tokens;
    ec.num_threads = threads;
    if (Status s = ec.Validate(); !s.ok()) return Fail(s);
    if (Status s = sp.Validate(); !s.ok()) return Fail(s);
    offline.default_sampling = sp;
    offline.default_max_tokens = max_tokens;
    offline.ignore_eos = ignore_eos;
    offline.add_special = !no_special;
    auto model = Model::Load(model_path);
    if (!model.ok()) return Fail(model.status());
    return RunOfflineBatch(**model, offline);
  }

  if (prompt.empty() == prompt_ids_text.empty())
    return Fail(InvalidArgumentError("give exactly one of --prompt and --prompt-ids"));
  auto kv_dtype = KvDtypeFromName(kv_dtype_name);
  if (!kv_dtype) return Fail(InvalidArgumentError("--kv-dtype must be f16, bf16, f32 or int8"));
  if (Status s = sp.Validate(); !s.ok()) return Fail(s);
  auto model_or = Model::Load(model_path);
  if (!model_or.ok()) return Fail(model_or.status());
  const Model& model = **model_or;
  const Tokenizer* tok = model.tokenizer();
  std::vector<int32_t> prompt_ids;
  if (!prompt_ids_text.empty()) {
    auto ids = ParseIds(prompt_ids_text);
    if (!ids.ok()) return Fail(ids.status());
    prompt_ids = *ids;
  } else {
    if (!tok) return Fail(InvalidArgumentError("this model has no tokenizer: use --prompt-ids"));
    prompt_ids = tok->Encode(prompt, !no_special);
  }
  params.max_new_tokens = max_tokens;
  params.kv_dtype = *kv_dtype;
  params.stop_at_eos = !ignore_eos;
  ThreadPool pool(threads);
  std::unique_ptr<IncrementalDetokenizer> detok;
  // The prompt text is echoed first, so the pieces continue it (keep a leading space).
  if (tok)
    detok = std::make_unique<IncrementalDetokenizer>(tok, true, !json_out && !prompt.empty());
  std::string text;
  if (!json_out && tok) {
    std::fputs(prompt.empty() ? "" : prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto result = Generate(model, prompt_ids, params, pool, [&](const SampledToken& t) {
    if (!detok) {
      if (!json_out) std::printf("%d ", t.id);
    } else {
      const std::string piece = detok->Add(t.id);
      text += piece;
      if (!json_out) std::fputs(piece.c_str(), stdout);
    }
    if (!json_out) std::fflush(stdout);
  });
  if (!result.ok()) {
    if (!json_out) std::printf("\n");
    return Fail(result.status());
  }
  if (detok) text += detok->Flush();
  const double prompt_tps =
      result->prompt_seconds > 0 ? prompt_ids.size() / result->prompt_seconds : 0;
  const double decode_tps =
      result->decode_seconds > 0 ? result->decode_steps / result->decode_seconds : 0;
  if (json_out) {
    nlohmann::json j;
    j["prompt_ids"] = prompt_ids;
    j["generated_ids"] = result->generated_ids;
    j["text"] = text;
    j["prompt_tokens_per_second"] = prompt_tps;
    j["decode_tokens_per_second"] = decode_tps;
    j["prompt_seconds"] = result->prompt_seconds;
    j["decode_seconds"] = result->decode_seconds;
    j["threads"] = threads;
    j["simd"] = kernels::SimdLevelName(kernels::ActiveKernels().level);
    nlohmann::json lp = nlohmann::json::array();
    for (const auto& t : result->tokens) {
      nlohmann::json e{{"id", t.id}, {"logprob", t.logprob}};
      if (!t.top_logprobs.empty()) {
        nlohmann::json top = nlohmann::json::array();
        for (auto& [id, l] : t.top_logprobs) top.push_back({id, l});
        e["top"] = top;
      }
      lp.push_back(e);
    }
    j["logprobs"] = lp;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    std::printf(
        "\n\nprompt: %zu tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s (%d "
        "threads, %s)\n",
        prompt_ids.size(), prompt_tps, result->generated_ids.size(), decode_tps, threads,
        kernels::SimdLevelName(kernels::ActiveKernels().level));
  }
  return 0;
}
