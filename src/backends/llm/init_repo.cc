#include "backends/llm/init_repo.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/executor_config.h"
#include "serving/ensemble_backend.h"
#include "serving/model_config_util.h"

namespace inflight::serving {
namespace {

namespace fs = std::filesystem;

struct Io {
  const char* name;
  const char* type;
  const char* dims;
  bool optional = false;
  bool scalar = false;  // dims [1] with reshape [] (the backend sees [B])
  bool ragged = false;
};

std::string Inputs(const std::vector<Io>& ios, const char* key) {
  std::ostringstream o;
  o << key << " [\n";
  for (size_t i = 0; i < ios.size(); ++i) {
    const Io& io = ios[i];
    o << "  {\n    name: \"" << io.name << "\"\n    data_type: " << io.type
      << "\n    dims: " << io.dims << "\n";
    if (io.scalar) o << "    reshape: { shape: [ ] }\n";
    if (io.ragged) o << "    allow_ragged_batch: true\n";
    if (io.optional) o << "    optional: true\n";
    o << "  }" << (i + 1 < ios.size() ? "," : "") << "\n";
  }
  o << "]\n";
  return o.str();
}

std::string Parameters(const std::vector<std::pair<std::string, std::string>>& params) {
  std::ostringstream o;
  for (const auto& [k, v] : params) {
    o << "parameters: {\n  key: \"" << k << "\"\n  value: {\n    string_value: \"" << v
      << "\"\n  }\n}\n";
  }
  return o.str();
}

// A millisecond value as the shortest text that reads back the same ("0", "250", "-1", "12.5").
std::string FormatMs(double ms) {
  std::ostringstream o;
  o << ms;
  return o.str();
}

std::string Header(const std::string& name, const std::string& backend, int32_t max_batch) {
  return "name: \"" + name + "\"\n" + backend + "\nmax_batch_size: " + std::to_string(max_batch) +
         "\n";
}

const std::vector<Io> kEnsembleOutputs = {
    {"text_output", "TYPE_STRING", "[ -1 ]"},
    {"cum_log_probs", "TYPE_FP32", "[ -1 ]"},
    {"output_log_probs", "TYPE_FP32", "[ -1, -1 ]"},
    {"context_logits", "TYPE_FP32", "[ -1, -1 ]"},
    {"generation_logits", "TYPE_FP32", "[ -1, -1, -1 ]"},
    {"batch_index", "TYPE_INT32", "[ 1 ]"},
    {"sequence_index", "TYPE_INT32", "[ 1 ]"},
    {"kv_cache_alloc_new_blocks", "TYPE_INT32", "[ 1 ]"},
    {"kv_cache_reused_blocks", "TYPE_INT32", "[ 1 ]"},
    {"kv_cache_alloc_total_blocks", "TYPE_INT32", "[ 1 ]"},
    {"arrival_time_ns", "TYPE_INT64", "[ 1 ]"},
    {"first_scheduled_time_ns", "TYPE_INT64", "[ 1 ]"},
    {"first_token_time_ns", "TYPE_INT64", "[ 1 ]"},
    {"last_token_time_ns", "TYPE_INT64", "[ 1 ]"},
    {"acceptance_rate", "TYPE_FP32", "[ 1 ]"},
    {"total_accepted_draft_tokens", "TYPE_INT32", "[ 1 ]"},
    {"total_draft_tokens", "TYPE_INT32", "[ 1 ]"},
    {"inter_token_latency_p50_ms", "TYPE_FP32", "[ 1 ]"},
    {"inter_token_latency_p99_ms", "TYPE_FP32", "[ 1 ]"},
};

std::vector<Io> TextModelInputs(bool scalar_flags) {
  return {
      {"text_input", "TYPE_STRING", "[ 1 ]"},
      {"decoder_text_input", "TYPE_STRING", "[ 1 ]", true},
      {"max_tokens", "TYPE_INT32", "[ 1 ]"},
      {"bad_words", "TYPE_STRING", "[ -1 ]", true},
      {"stop_words", "TYPE_STRING", "[ -1 ]", true},
      {"exclude_input_in_output", "TYPE_BOOL", "[ 1 ]", true},
      {"end_id", "TYPE_INT32", "[ 1 ]", true},
      {"pad_id", "TYPE_INT32", "[ 1 ]", true},
      {"top_k", "TYPE_INT32", "[ 1 ]", true},
      {"top_p", "TYPE_FP32", "[ 1 ]", true},
      {"temperature", "TYPE_FP32", "[ 1 ]", true},
      {"length_penalty", "TYPE_FP32", "[ 1 ]", true},
      {"repetition_penalty", "TYPE_FP32", "[ 1 ]", true},
      {"min_tokens", "TYPE_INT32", "[ 1 ]", true},
      {"presence_penalty", "TYPE_FP32", "[ 1 ]", true},
      {"frequency_penalty", "TYPE_FP32", "[ 1 ]", true},
      {"seed", "TYPE_UINT64", "[ 1 ]", true},
      {"return_log_probs", "TYPE_BOOL", "[ 1 ]", true, scalar_flags},
      {"return_context_logits", "TYPE_BOOL", "[ 1 ]", true, scalar_flags},
      {"return_generation_logits", "TYPE_BOOL", "[ 1 ]", true, scalar_flags},
      {"num_return_sequences", "TYPE_INT32", "[ 1 ]", true, scalar_flags},
      {"beam_width", "TYPE_INT32", "[ 1 ]", true},
      {"stream", "TYPE_BOOL", "[ 1 ]", true},
      {"return_perf_metrics", "TYPE_BOOL", "[ 1 ]", true, scalar_flags},
      {"prompt_embedding_table", "TYPE_FP16", "[ -1, -1 ]", true},
      {"prompt_vocab_size", "TYPE_INT32", "[ 1 ]", true},
      {"prompt_table_extra_id", "TYPE_UINT64", "[ 1 ]", true},
      {"embedding_bias_words", "TYPE_STRING", "[ -1 ]", true},
      {"embedding_bias_weights", "TYPE_FP32", "[ -1 ]", true},
      {"lora_task_id", "TYPE_UINT64", "[ 1 ]", true},
      {"lora_weights", "TYPE_FP16", "[ -1, -1 ]", true, false, true},
      {"lora_config", "TYPE_INT32", "[ -1, 3 ]", true, false, true},
      {"guided_decoding_guide_type", "TYPE_STRING", "[ 1 ]", true, false, true},
      {"guided_decoding_guide", "TYPE_STRING", "[ 1 ]", true, false, true},
      {"lookahead_window_size", "TYPE_INT32", "[ 1 ]", true},
      {"lookahead_ngram_size", "TYPE_INT32", "[ 1 ]", true},
      {"lookahead_verification_set_size", "TYPE_INT32", "[ 1 ]", true},
  };
}

// Field i of a "W,N,G" lookahead triple, or the server's default when none was given.
std::string LookaheadField(const std::string& triple, int i) {
  const LookaheadConfig d = ExecutorConfig{}.lookahead;
  int v[3] = {d.window, d.ngram, d.verification_set};
  if (!triple.empty()) std::sscanf(triple.c_str(), "%d,%d,%d", &v[0], &v[1], &v[2]);
  return std::to_string(v[i]);
}

std::string LlmConfig(const InitRepoOptions& o, const std::string& model_path,
                      const std::string& draft_path) {
  std::vector<Io> inputs = {
      {"input_ids", "TYPE_INT32", "[ -1 ]", true, false, true},
      {"input_lengths", "TYPE_INT32", "[ 1 ]", false, true},
      {"request_output_len", "TYPE_INT32", "[ 1 ]", false, true},
      {"end_id", "TYPE_INT32", "[ 1 ]", true, true},
      {"pad_id", "TYPE_INT32", "[ 1 ]", true, true},
      {"streaming", "TYPE_BOOL", "[ 1 ]", true, true},
      {"beam_width", "TYPE_INT32", "[ 1 ]", true, true},
      {"temperature", "TYPE_FP32", "[ 1 ]", true, true},
      {"runtime_top_k", "TYPE_INT32", "[ 1 ]", true, true},
      {"runtime_top_p", "TYPE_FP32", "[ 1 ]", true, true},
      {"len_penalty", "TYPE_FP32", "[ 1 ]", true, true},
      {"early_stopping", "TYPE_BOOL", "[ 1 ]", true, true},
      {"beam_search_diversity_rate", "TYPE_FP32", "[ 1 ]", true, true},
      {"repetition_penalty", "TYPE_FP32", "[ 1 ]", true, true},
      {"min_tokens", "TYPE_INT32", "[ 1 ]", true, true},
      {"presence_penalty", "TYPE_FP32", "[ 1 ]", true, true},
      {"frequency_penalty", "TYPE_FP32", "[ 1 ]", true, true},
      {"seed", "TYPE_UINT64", "[ 1 ]", true, true},
      {"return_log_probs", "TYPE_BOOL", "[ 1 ]", true, true},
      {"return_context_logits", "TYPE_BOOL", "[ 1 ]", true, true},
      {"return_generation_logits", "TYPE_BOOL", "[ 1 ]", true, true},
      {"exclude_input_in_output", "TYPE_BOOL", "[ 1 ]", true, true},
      {"stop", "TYPE_BOOL", "[ 1 ]", true, true},
      {"stop_words_list", "TYPE_INT32", "[ 2, -1 ]", true, false, true},
      {"bad_words_list", "TYPE_INT32", "[ 2, -1 ]", true, false, true},
      {"embedding_bias", "TYPE_FP32", "[ -1 ]", true, false, true},
      {"num_return_sequences", "TYPE_INT32", "[ 1 ]", true, true},
      {"return_perf_metrics", "TYPE_BOOL", "[ 1 ]", true, true},
      {"draft_input_ids", "TYPE_INT32", "[ -1 ]", true, false, true},
      {"draft_logits", "TYPE_FP32", "[ -1, -1 ]", true, false, true},
      {"draft_acceptance_threshold", "TYPE_FP32", "[ 1 ]", true, true},
      {"num_draft_tokens", "TYPE_INT32", "[ 1 ]", true, true},
      {"lookahead_window_size", "TYPE_INT32", "[ 1 ]", true, true},
      {"lookahead_ngram_size", "TYPE_INT32", "[ 1 ]", true, true},
      {"lookahead_verification_set_size", "TYPE_INT32", "[ 1 ]", true, true},
      // Declared for the ensemble's wiring; a request that fills them gets UNIMPLEMENTED.
      {"decoder_input_ids", "TYPE_INT32", "[ -1 ]", true, false, true},
      {"decoder_input_lengths", "TYPE_INT32", "[ 1 ]", true, true},
      {"prompt_embedding_table", "TYPE_FP16", "[ -1, -1 ]", true, false, true},
      {"prompt_vocab_size", "TYPE_INT32", "[ 1 ]", true, true},
      {"prompt_table_extra_ids", "TYPE_UINT64", "[ -1 ]", true, false, true},
      {"lora_task_id", "TYPE_UINT64", "[ 1 ]", true, true},
      {"lora_weights", "TYPE_FP16", "[ -1, -1 ]", true, false, true},
      {"lora_config", "TYPE_INT32", "[ -1, 3 ]", true, false, true},
      {"guided_decoding_guide_type", "TYPE_STRING", "[ 1 ]", true, false, true},
      {"guided_decoding_guide", "TYPE_STRING", "[ 1 ]", true, false, true},
      {"context_phase_params", "TYPE_UINT8", "[ -1 ]", true, false, true},
  };
  std::vector<Io> outputs = {
      {"output_ids", "TYPE_INT32", "[ -1, -1 ]"},
      {"context_phase_params", "TYPE_UINT8", "[ -1 ]"},
      {"sequence_length", "TYPE_INT32", "[ -1 ]"},
      {"cum_log_probs", "TYPE_FP32", "[ -1 ]"},
      {"output_log_probs", "TYPE_FP32", "[ -1, -1 ]"},
      {"context_logits", "TYPE_FP32", "[ -1, -1 ]"},
      {"generation_logits", "TYPE_FP32", "[ -1, -1, -1 ]"},
      {"batch_index", "TYPE_INT32", "[ 1 ]"},
      {"sequence_index", "TYPE_INT32", "[ 1 ]"},
      {"kv_cache_alloc_new_blocks", "TYPE_INT32", "[ 1 ]"},
      {"kv_cache_reused_blocks", "TYPE_INT32", "[ 1 ]"},
      {"kv_cache_alloc_total_blocks", "TYPE_INT32", "[ 1 ]"},
      {"arrival_time_ns", "TYPE_INT64", "[ 1 ]"},
      {"first_scheduled_time_ns", "TYPE_INT64", "[ 1 ]"},
      {"first_token_time_ns", "TYPE_INT64", "[ 1 ]"},
      {"last_token_time_ns", "TYPE_INT64", "[ 1 ]"},
      {"acceptance_rate", "TYPE_FP32", "[ 1 ]"},
      {"total_accepted_draft_tokens", "TYPE_INT32", "[ 1 ]"},
      {"total_draft_tokens", "TYPE_INT32", "[ 1 ]"},
      {"inter_token_latency_p50_ms", "TYPE_FP32", "[ 1 ]"},
      {"inter_token_latency_p99_ms", "TYPE_FP32", "[ 1 ]"},
  };
  std::ostringstream c;
  if (!o.context_url.empty()) {
    // The router: the same interface, its requests run on the two other servers' models.
    c << Header("tensorrt_llm", "backend: \"inflight_disaggregated\"", o.max_batch_size);
    c << "model_transaction_policy {\n  decoupled: true\n}\n";
    c << Inputs(inputs, "input") << Inputs(outputs, "output");
    c << Parameters({
        {"context_model_name", "tensorrt_llm"},
        {"context_model_url", o.context_url},
        {"generation_model_name", "tensorrt_llm"},
        {"generation_model_url", o.generation_url},
        {"context_phase_transport", o.disaggregated_transport},
    });
    return c.str();
  }
  c << Header("tensorrt_llm", "backend: \"tensorrtllm\"", o.max_batch_size);
  c << "model_transaction_policy {\n  decoupled: " << (o.decoupled ? "true" : "false") << "\n}\n";
  c << "dynamic_batching {\n  preferred_batch_size: [ " << o.max_batch_size
    << " ]\n  max_queue_delay_microseconds: 0\n  default_queue_policy: { max_queue_size: "
    << o.max_queue_size << " }\n}\n";
  c << Inputs(inputs, "input") << Inputs(outputs, "output");
  c << "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n";
  c << Parameters({
      {"gpt_model_type", o.batching_strategy},
      {"gpt_model_path", model_path},
      {"batch_scheduler_policy", o.scheduler_policy},
      {"max_beam_width", std::to_string(o.max_beam_width)},
      {"max_num_tokens", std::to_string(o.max_num_tokens)},
      {"max_batch_size", std::to_string(o.max_batch_size)},
      {"kv_cache_free_gpu_mem_fraction", std::to_string(o.kv_cache_free_mem_fraction)},
      {"kv_cache_dtype", o.kv_cache_dtype},
      {"kv_cache_disk_path", o.kv_cache_disk_path},
      {"kv_cache_disk_bytes", std::to_string(o.kv_cache_disk_bytes)},
      {"context_phase_shm_dir", o.context_phase_shm_dir},
      {"max_tokens_in_paged_kv_cache", "${max_tokens_in_paged_kv_cache}"},
      {"enable_kv_cache_reuse", o.enable_kv_cache_reuse ? "true" : "false"},
      {"enable_chunked_context", o.enable_chunked_context ? "true" : "false"},
      {"max_inter_token_latency_ms", FormatMs(o.max_inter_token_latency_ms)},
      {"event_buffer_max_size", std::to_string(o.kv_event_buffer_size)},
      {"exclude_input_in_output", o.exclude_input_in_output ? "true" : "false"},
      {"max_queue_size", std::to_string(o.max_queue_size)},
      {"speculative_decoding_mode", o.speculative_decoding_mode},
      {"max_draft_len", std::to_string(o.max_draft_len)},
      {"draft_model_path", draft_path.empty() ? model_path : draft_path},
      {"draft_model_layers", std::to_string(o.draft_model_layers)},
      {"tensor_parallel_size", std::to_string(o.tensor_parallel_size)},
      {"pipeline_parallel_size", std::to_string(o.pipeline_parallel_size)},
      {"moe_ep_size", std::to_string(o.moe_ep_size)},
      {"moe_tp_size", std::to_string(o.moe_tp_size)},
      {"stats_check_period_ms", "100"},
      {"lookahead_window_size", LookaheadField(o.lookahead_config, 0)},
      {"lookahead_ngram_size", LookaheadField(o.lookahead_config, 1)},
      {"lookahead_verification_set_size", LookaheadField(o.lookahead_config, 2)},
  });
  return c.str();
}

std::string PreprocessingConfig(const InitRepoOptions& o, const std::string& tokenizer) {
  std::vector<Io> inputs = {
      {"QUERY", "TYPE_STRING", "[ 1 ]"},
      {"DECODER_QUERY", "TYPE_STRING", "[ 1 ]", true},
      {"REQUEST_OUTPUT_LEN", "TYPE_INT32", "[ 1 ]"},
      {"BAD_WORDS_DICT", "TYPE_STRING", "[ -1 ]", true},
      {"STOP_WORDS_DICT", "TYPE_STRING", "[ -1 ]", true},
      {"EMBEDDING_BIAS_WORDS", "TYPE_STRING", "[ -1 ]", true},
      {"EMBEDDING_BIAS_WEIGHTS", "TYPE_FP32", "[ -1 ]", true},
      {"END_ID", "TYPE_INT32", "[ 1 ]", true},
      {"PAD_ID", "TYPE_INT32", "[ 1 ]", true},
      {"PROMPT_TABLE_EXTRA_ID", "TYPE_UINT64", "[ 1 ]", true},
  };
  std::vector<Io> outputs = {
      {"INPUT_ID", "TYPE_INT32", "[ -1 ]"},
      {"REQUEST_INPUT_LEN", "TYPE_INT32", "[ 1 ]"},
      {"DECODER_INPUT_ID", "TYPE_INT32", "[ -1 ]"},
      {"REQUEST_DECODER_INPUT_LEN", "TYPE_INT32", "[ 1 ]"},
      {"BAD_WORDS_IDS", "TYPE_INT32", "[ 2, -1 ]"},
      {"STOP_WORDS_IDS", "TYPE_INT32", "[ 2, -1 ]"},
      {"EMBEDDING_BIAS", "TYPE_FP32", "[ -1 ]"},
      {"REQUEST_OUTPUT_LEN", "TYPE_INT32", "[ -1 ]"},
      {"OUT_END_ID", "TYPE_INT32", "[ 1 ]"},
      {"OUT_PAD_ID", "TYPE_INT32", "[ 1 ]"},
      {"OUT_PROMPT_TABLE_EXTRA_IDS", "TYPE_UINT64", "[ 1 ]"},
  };
  std::ostringstream c;
  c << Header("preprocessing", "backend: \"python\"", o.max_batch_size);
  c << "dynamic_batching {\n  preferred_batch_size: [ " << o.max_batch_size
    << " ]\n  max_queue_delay_microseconds: 0\n}\n";
  c << Inputs(inputs, "input") << Inputs(outputs, "output");
  c << Parameters({{"tokenizer_dir", tokenizer}, {"add_special_tokens", "true"}});
  c << "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n";
  return c.str();
}

std::string PostprocessingConfig(const InitRepoOptions& o, const std::string& tokenizer) {
  std::ostringstream c;
  c << Header("postprocessing", "backend: \"python\"", o.max_batch_size);
  c << "dynamic_batching {}\n";
  c << Inputs(
      {{"TOKENS_BATCH", "TYPE_INT32", "[ -1, -1 ]"}, {"SEQUENCE_LENGTH", "TYPE_INT32", "[ -1 ]"}},
      "input");
  c << Inputs({{"OUTPUT", "TYPE_STRING", "[ -1 ]"}}, "output");
  c << Parameters({{"tokenizer_dir", tokenizer}, {"skip_special_tokens", "true"}});
  c << "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n";
  return c.str();
}

std::string EnsembleConfig(const InitRepoOptions& o) {
  inference::ModelConfig c;
  auto parsed = ParseModelConfigText(
      Header("ensemble", "platform: \"ensemble\"", o.max_batch_size) +
      Inputs(TextModelInputs(false), "input") + Inputs(kEnsembleOutputs, "output"));
  if (parsed.ok()) c = *parsed;
  *c.mutable_ensemble_scheduling() = ReferenceEnsembleSteps("tensorrt_llm");
  return ModelConfigToText(c);
}

std::string BlsConfig(const InitRepoOptions& o) {
  std::ostringstream c;
  c << Header("tensorrt_llm_bls", "backend: \"python\"", o.max_batch_size);
  c << "model_transaction_policy {\n  decoupled: " << (o.decoupled ? "true" : "false") << "\n}\n";
  std::vector<Io> inputs = TextModelInputs(true);
  inputs.push_back({"num_draft_tokens", "TYPE_INT32", "[ 1 ]", true});
  c << Inputs(inputs, "input") << Inputs(kEnsembleOutputs, "output");
  c << Parameters({{"tensorrt_llm_model_name", "tensorrt_llm"}, {"accumulate_tokens", "false"}});
  c << "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n";
  return c.str();
}

// Puts the model (a file or a Hugging Face folder) into `weights`: hard links where the
// filesystem allows, copies elsewhere. Returns the path the configs name, relative to a model
// folder ("../weights/<name>").
StatusOr<std::string> PlaceModel(const fs::path& model, const fs::path& weights) {
  std::error_code ec;
  const fs::path target = weights / model.filename();
  if (fs::equivalent(model, target, ec)) return "../weights/" + model.filename().string();
  fs::create_directories(weights, ec);
  if (ec) return InvalidArgumentError("cannot create '" + weights.string() + "': " + ec.message());
  fs::remove_all(target, ec);
  if (fs::is_directory(model)) {
    fs::copy(model, target, fs::copy_options::recursive | fs::copy_options::create_hard_links, ec);
    if (ec) {
      fs::remove_all(target, ec);
      fs::copy(model, target, fs::copy_options::recursive, ec);
    }
  } else {
    fs::create_hard_link(model, target, ec);
    if (ec) fs::copy_file(model, target, fs::copy_options::overwrite_existing, ec);
  }
  if (ec)
    return InvalidArgumentError("cannot put '" + model.string() + "' into '" + weights.string() +
                                "': " + ec.message());
  return "../weights/" + model.filename().string();
}

}  // namespace

Status InitRepository(const InitRepoOptions& o) {
  std::error_code ec;
  if (o.context_url.empty() != o.generation_url.empty())
    return InvalidArgumentError(
        "--disaggregated-context-url and --disaggregated-generation-url go together");
  for (const std::string* url : {&o.context_url, &o.generation_url}) {
    if (url->find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") !=
        std::string::npos)
      return InvalidArgumentError("a disaggregated server's URL is host:port, got '" + *url + "'");
  }
  if (!fs::exists(o.model_path, ec))
    return NotFoundError("--model '" + o.model_path + "' does not exist");
  std::string model = fs::absolute(o.model_path).lexically_normal().string();
  const fs::path out(o.out_dir);
  if (fs::exists(out / "tensorrt_llm" / "config.pbtxt") && !o.force) {
    return InvalidArgumentError("'" + o.out_dir +
                                "' already holds a repository (use --force to overwrite)");
  }
  std::string draft;
  if (!o.draft_model_path.empty()) {
    if (!fs::exists(o.draft_model_path, ec))
      return NotFoundError("--draft-model '" + o.draft_model_path + "' does not exist");
    draft = fs::absolute(o.draft_model_path).lexically_normal().string();
  }
  if (o.model_in_repository) {
    auto placed = PlaceModel(fs::path(model), out / "weights");
    if (!placed.ok()) return placed.status();
    model = *placed;
    if (!draft.empty()) {
      auto placed_draft = PlaceModel(fs::path(draft), out / "weights");
      if (!placed_draft.ok()) return placed_draft.status();
      draft = *placed_draft;
    }
  }
  const std::vector<std::pair<std::string, std::string>> models = {
      {"preprocessing", PreprocessingConfig(o, model)},
      {"tensorrt_llm", LlmConfig(o, model, draft)},
      {"postprocessing", PostprocessingConfig(o, model)},
      {"ensemble", EnsembleConfig(o)},
      {"tensorrt_llm_bls", BlsConfig(o)},
  };
  for (const auto& [name, text] : models) {
    auto parsed = ParseModelConfigText(text);
    if (!parsed.ok())
      return InternalError("init-repo wrote a bad config for " + name + ": " +
                           parsed.status().message());
    fs::create_directories(out / name / "1", ec);
    if (ec)
      return InvalidArgumentError("cannot create '" + (out / name).string() + "': " + ec.message());
    std::ofstream f(out / name / "config.pbtxt");
    f << text;
    if (!f)
      return InvalidArgumentError("cannot write '" + (out / name / "config.pbtxt").string() + "'");
  }
  return OkStatus();
}

}  // namespace inflight::serving
