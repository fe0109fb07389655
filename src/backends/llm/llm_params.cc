#include "backends/llm/llm_params.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "base/logging.h"
#include "parallel/mpi_process.h"
#include "serving/model_config_util.h"
#include "serving/model_paths.h"

namespace inflight::serving {

namespace fs = std::filesystem;

StatusOr<LlmParams> ReadParams(const inference::ModelConfig& config) {
  LlmParams p;
  ExecutorConfig& e = p.executor;
  auto type = GetParameter(config, "gpt_model_type");
  if (!type)
    return InvalidArgumentError("parameter gpt_model_type (batching_strategy) is required");
  if (*type == "inflight_fused_batching" || *type == "inflight_batching") {
    e.batching = BatchingStrategy::kInflight;
  } else if (*type == "V1" || *type == "v1" || *type == "static") {
    e.batching = BatchingStrategy::kStatic;
  } else {
    return InvalidArgumentError("parameter gpt_model_type: '" + *type +
                                "' is not one of inflight_fused_batching, inflight_batching, V1");
  }
  if (auto policy = GetParameter(config, "batch_scheduler_policy")) {
    auto pol = CapacityPolicyFromName(*policy);
    if (!pol.ok())
      return InvalidArgumentError("parameter batch_scheduler_policy: " + pol.status().message());
    e.policy = *pol;
  }
  const int64_t max_beam_width = GetIntParameter(config, "max_beam_width", 1);
  if (max_beam_width < 1 || max_beam_width > kMaxBeamWidth) {
    return InvalidArgumentError("parameter max_beam_width: must be in [1, " +
                                std::to_string(kMaxBeamWidth) + "]");
  }
  e.max_beam_width = static_cast<int32_t>(max_beam_width);
  if (auto mode = GetParameter(config, "speculative_decoding_mode")) {
    auto m = SpeculativeModeFromName(*mode);
    if (!m.ok())
      return InvalidArgumentError("parameter speculative_decoding_mode: " + m.status().message());
    e.speculative_mode = *m;
  }
  if (auto mode = GetParameter(config, "decoding_mode")) {
    // TensorRT-LLM's decoding_mode names lookahead, medusa and eagle among the sampling
    // modes; the others (top_k, top_p, beam_search) are what each request's fields choose
    // here, and redrafter needs a drafter this server does not load yet.
    if (*mode == "lookahead") {
      e.speculative_mode = SpeculativeMode::kLookahead;
    } else if (*mode == "medusa") {
      e.speculative_mode = SpeculativeMode::kMedusa;
    } else if (*mode == "eagle") {
      e.speculative_mode = SpeculativeMode::kEagle;
    } else if (*mode == "redrafter") {
      return UnimplementedError("parameter decoding_mode: '" + *mode +
                                "' is not supported (lookahead, medusa, eagle, top_k, top_p, "
                                "top_k_top_p, beam_search, auto)");
    } else if (*mode != "top_k" && *mode != "top_p" && *mode != "top_k_top_p" &&
               *mode != "beam_search" && *mode != "auto" && !mode->empty()) {
      return InvalidArgumentError("parameter decoding_mode: unknown mode '" + *mode + "'");
    }
  }
  e.lookahead.window = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "lookahead_window_size", e.lookahead.window), -1, 1 << 20));
  e.lookahead.ngram = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "lookahead_ngram_size", e.lookahead.ngram), -1, 1 << 20));
  e.lookahead.verification_set = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "lookahead_verification_set_size", e.lookahead.verification_set), -1,
      1 << 20));
  e.max_draft_tokens =
      static_cast<int32_t>(GetIntParameter(config, "max_draft_len", e.max_draft_tokens));
  e.prompt_lookup_ngram = static_cast<int32_t>(
      GetIntParameter(config, "prompt_lookup_max_ngram", e.prompt_lookup_ngram));
  e.max_tokens_in_paged_kv_cache = GetIntParameter(config, "max_tokens_in_paged_kv_cache", 0);
  e.kv_cache_free_mem_fraction = GetDoubleParameter(config, "kv_cache_free_gpu_mem_fraction", 0.9);
  e.enable_kv_cache_reuse = GetBoolParameter(config, "enable_kv_cache_reuse", true);
  e.enable_chunked_context = GetBoolParameter(config, "enable_chunked_context", false);
  // 0 (the default): auto, twice the running batch's decode step; < 0: off.
  e.max_inter_token_latency_ms = GetDoubleParameter(config, "max_inter_token_latency_ms", 0);
  // TensorRT-LLM's KvCacheConfig event buffer: events kept for routers (0: off).
  e.kv_event_buffer_size = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "event_buffer_max_size", 0), -1, int64_t{1} << 23));
  e.max_num_tokens =
      static_cast<int32_t>(GetIntParameter(config, "max_num_tokens", e.max_num_tokens));
  e.max_batch_size =
      static_cast<int32_t>(GetIntParameter(config, "max_batch_size", e.max_batch_size));
  e.tokens_per_block =
      static_cast<int32_t>(GetIntParameter(config, "tokens_per_block", e.tokens_per_block));
  e.num_threads = static_cast<int32_t>(
      GetIntParameter(config, "num_threads", std::max(1u, std::thread::hardware_concurrency())));
  const int64_t queue = config.has_dynamic_batching()
                            ? config.dynamic_batching().default_queue_policy().max_queue_size()
                            : 0;
  e.max_queue_size = static_cast<int32_t>(GetIntParameter(config, "max_queue_size", queue));
  p.unbounded_queue = e.max_queue_size < 0;
  if (p.unbounded_queue) e.max_queue_size = 0;
  if (auto kv = GetParameter(config, "kv_cache_dtype")) {
    auto dt = KvDtypeFromName(*kv);
    if (!dt) {
      return InvalidArgumentError("parameter kv_cache_dtype: '" + *kv +
                                  "' is not f16, bf16, f32 or int8");
    }
    e.kv_dtype = *dt;
  }
  e.kv_cache_disk_bytes = GetIntParameter(config, "kv_cache_disk_bytes", 0);
  if (e.kv_cache_disk_bytes < 0)
    return InvalidArgumentError("parameter kv_cache_disk_bytes must be >= 0");
  p.exclude_input_in_output = GetBoolParameter(config, "exclude_input_in_output", false);
  p.lora_cache_bytes = GetIntParameter(config, "lora_cache_host_memory_bytes", p.lora_cache_bytes);
  if (p.lora_cache_bytes < 1)
    return InvalidArgumentError("parameter lora_cache_host_memory_bytes must be >= 1");
  p.stats_period_ms = std::max<int64_t>(10, GetIntParameter(config, "stats_check_period_ms", 100));
  const auto int32_parameter = [&](const char* name, int64_t fallback, int32_t* out) -> Status {
    const int64_t v = GetIntParameter(config, name, fallback);
    if (v < 0 || v > 1 << 20)
      return InvalidArgumentError(std::string("parameter ") + name + " is out of range");
    *out = static_cast<int32_t>(v);
    return OkStatus();
  };
  RETURN_IF_ERROR(int32_parameter("tensor_parallel_size", 1, &p.parallel.tp_size));
  RETURN_IF_ERROR(int32_parameter("pipeline_parallel_size", 1, &p.parallel.pp_size));
  RETURN_IF_ERROR(int32_parameter("pipeline_micro_batches", 0, &p.parallel.micro_batches));
  RETURN_IF_ERROR(int32_parameter("moe_ep_size", 0, &p.parallel.moe_ep_size));
  RETURN_IF_ERROR(int32_parameter("moe_tp_size", 0, &p.parallel.moe_tp_size));
  p.parallel.share_host_cores = !GetParameter(config, "num_threads").has_value();
  p.parallel.heartbeat_ms =
      GetIntParameter(config, "parallel_heartbeat_ms", p.parallel.heartbeat_ms);
  p.parallel.failure_timeout_ms =
      GetIntParameter(config, "parallel_failure_timeout_ms", p.parallel.failure_timeout_ms);
  if (Status ps = p.parallel.Validate(); !ps.ok())
    return InvalidArgumentError("parameter " + ps.message());
  Status s = e.Validate();
  if (!s.ok()) return s;
  return p;
}

StatusOr<std::unique_ptr<parallel::ParallelModelRunner>> CreateParallelRunner(
    const inference::ModelConfig& config, const BackendContext& context,
    const std::string& model_path, const LlmParams& params, bool* holds_world) {
  const int ranks = params.parallel.tp_size * params.parallel.pp_size;
  MPI_Comm comm = MPI_COMM_NULL;
  if (parallel::LaunchedByMpirun() && parallel::WorldSize() > 1) {
    ASSIGN_OR_RETURN(comm, parallel::ClaimWorld(ranks, context.model_name));
    *holds_world = true;
  } else {
    std::error_code ec;
    std::string worker = fs::read_symlink("/proc/self/exe", ec).string();
    if (auto p = GetParameter(config, "executor_worker_path"); p && !p->empty()) {
      ASSIGN_OR_RETURN(worker, ConfinedPath("executor_worker_path", *p, context.model_dir,
                                            context.allowed_roots));
    }
    ASSIGN_OR_RETURN(comm, parallel::SpawnWorkers(ranks - 1, worker));
  }
  auto runner =
      parallel::ParallelModelRunner::Create(comm, model_path, params.executor, params.parallel);
  if (!runner.ok() && *holds_world) {
    parallel::ReleaseWorld();
    *holds_world = false;
  }
  return runner;
}

// A head's matrices in memory (parameter `name`): q8_0 (default) or q4_0 quantized at load,
// or as stored.
StatusOr<DType> HeadWeightType(const inference::ModelConfig& config, const char* name) {
  auto type = GetParameter(config, name);
  if (!type || type->empty() || *type == "q8_0") return DType::kQ8_0;
  if (*type == "q4_0") return DType::kQ4_0;
  if (*type == "as_stored") return DType::kF16;
  return InvalidArgumentError(std::string("parameter ") + name + ": '" + *type +
                              "' is not one of q8_0, q4_0, as_stored");
}

// Medusa heads from medusa_model_path (a folder with medusa_lm_head.safetensors, or the file)
// checked against the model, and the tree of medusa_choices (default: DefaultMedusaChoices).
Status LoadMedusaHeads(const inference::ModelConfig& config, const BackendContext& context,
                       const inflight::ModelConfig& model, ExecutorConfig* e) {
  auto where = GetParameter(config, "medusa_model_path");
  if (!where || where->empty())
    return InvalidArgumentError(
        "parameter medusa_model_path: decoding_mode medusa needs the heads");
  auto path = ConfinedPath("medusa_model_path", *where, context.model_dir, context.allowed_roots);
  if (!path.ok()) return path.status();
  auto weights = HeadWeightType(config, "medusa_weights");
  if (!weights.ok()) return weights.status();
  auto heads = MedusaHeads::Load(*path, model, *weights);
  if (!heads.ok()) return heads.status();
  e->medusa_heads = std::shared_ptr<MedusaHeads>(std::move(heads).value());
  if (auto choices = GetParameter(config, "medusa_choices"); choices && !choices->empty()) {
    auto parsed = ParseMedusaChoices(*choices, e->medusa_heads->num_heads(), kMaxLookaheadDrafts);
    if (!parsed.ok())
      return InvalidArgumentError("parameter medusa_choices: " + parsed.status().message());
    e->medusa_choices = std::move(parsed).value();
  }
  INFLIGHT_LOG(kInfo) << "Medusa heads: " << e->medusa_heads->num_heads() << " heads of "
                      << e->medusa_heads->num_layers() << " residual blocks ("
                      << e->medusa_heads->WeightBytes() / 1000000 << " MB read per step)";
  return OkStatus();
}

// An EAGLE head (EAGLE-3 or EAGLE-1/2) from eagle_model_path (a Hugging Face folder, or its
// .safetensors file) checked against the model, and the tree of eagle_choices (default:
// DefaultEagleChoices).
Status LoadEagleHead(const inference::ModelConfig& config, const BackendContext& context,
                     const inflight::Model& model, ExecutorConfig* e) {
  auto where = GetParameter(config, "eagle_model_path");
  if (!where || where->empty())
    return InvalidArgumentError("parameter eagle_model_path: decoding_mode eagle needs the head");
  auto path = ConfinedPath("eagle_model_path", *where, context.model_dir, context.allowed_roots);
  if (!path.ok()) return path.status();
  auto weights = HeadWeightType(config, "eagle_weights");
  if (!weights.ok()) return weights.status();
  auto head = EagleHead::Load(*path, model, *weights);
  if (!head.ok()) return head.status();
  e->eagle_head = std::shared_ptr<EagleHead>(std::move(head).value());
  if (auto choices = GetParameter(config, "eagle_choices"); choices && !choices->empty()) {
    auto parsed =
        ParseMedusaChoices(*choices, kMaxEagleChoicesDepth, kMaxLookaheadDrafts, "eagle_choices");
    if (!parsed.ok())
      return InvalidArgumentError("parameter eagle_choices: " + parsed.status().message());
    e->eagle_choices = std::move(parsed).value();
  }
  // EAGLE-2's dynamic tree (TensorRT-LLM's runtime flags eagle_use_dynamic_tree and
  // eagle_dynamic_tree_max_top_k; its levels as its engines' num_eagle_layers; max_draft_len is
  // its node count).
  e->eagle_dynamic_tree = GetBoolParameter(config, "eagle_use_dynamic_tree", false);
  e->eagle_dynamic_tree_max_top_k = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "eagle_dynamic_tree_max_top_k", e->eagle_dynamic_tree_max_top_k), -1,
      1 << 20));
  e->eagle_num_layers = static_cast<int32_t>(std::clamp<int64_t>(
      GetIntParameter(config, "eagle_num_layers", e->eagle_num_layers), -1, 1 << 20));
  const EagleHead& h = *e->eagle_head;
  std::string reads;
  for (int32_t l : h.aux_layers()) reads += (reads.empty() ? "" : ", ") + std::to_string(l);
  INFLIGHT_LOG(kInfo) << "EAGLE-" << (h.version() == 1 ? "1/2" : "3") << " head: reads "
                      << (h.version() == 1 ? "the model's final normed state (layer "
                                           : "the inputs of layers ")
                      << reads << (h.version() == 1 ? ")" : "")
                      << (e->eagle_dynamic_tree ? "; dynamic tree (EAGLE-2)" : "")
                      << "; draft vocabulary " << h.draft_vocab_size() << " ("
                      << (h.LayerBytes() + h.OutputBytes()) / 1000000
                      << " MB read per drafting pass)";
  return OkStatus();
}

}  // namespace inflight::serving
