// `inflight-server init-repo`: writes a ready model repository in the layout of the
// reference's all_models/inflight_batcher_llm after fill_template.py: preprocessing,
// tensorrt_llm, postprocessing, ensemble and tensorrt_llm_bls, with defaults for a CPU.
#pragma once

#include <string>

#include "base/status.h"

namespace inflight::serving {

struct InitRepoOptions {
  std::string model_path;  // GGUF file or Hugging Face folder (weights and tokenizer)
  std::string out_dir;
  int32_t max_batch_size = 64;
  bool decoupled = true;  // streaming needs it; /generate still works (one response)
  std::string batching_strategy = "inflight_fused_batching";
  std::string scheduler_policy = "guaranteed_no_evict";
  int32_t max_num_tokens = 256;             // per step: bounds a step's time on two cores
  double kv_cache_free_mem_fraction = 0.5;  // of host memory left after the weights
  bool enable_chunked_context = true;       // long prompts do not stall the others' tokens
  // Target time between a running sequence's tokens while prompts arrive (0: auto, twice the
  // decode step; < 0: off).
  double max_inter_token_latency_ms = 0;
  std::string kv_cache_dtype = "f16";
  std::string kv_cache_disk_path;    // the disk tier's directory (empty: off)
  int64_t kv_cache_disk_bytes = 0;   // f16, bf16, f32 or int8 (8-bit K/V with scales)
  int32_t kv_event_buffer_size = 0;  // event_buffer_max_size: KV cache events kept (0: off)
  bool enable_kv_cache_reuse = true;
  int32_t max_queue_size = 0;
  bool exclude_input_in_output = false;
  int32_t max_beam_width = 1;                      // widest beam search a request may ask for
  std::string speculative_decoding_mode = "none";  // prompt_lookup, draft_model, lookahead
  std::string lookahead_config;                    // "W,N,G" (empty: the server's default)
  int32_t max_draft_len = 4;                       // draft tokens per step and sequence
  std::string draft_model_path;        // draft_model: the draft (default: the model itself)
  int32_t draft_model_layers = 0;      // draft_model: only its first n layers (0: all)
  int32_t tensor_parallel_size = 1;    // MPI ranks splitting each layer
  int32_t moe_ep_size = 0;             // expert parallelism in the TP group (0: derived)
  int32_t moe_tp_size = 0;             // ranks splitting each expert's columns (0: derived)
  int32_t pipeline_parallel_size = 1;  // MPI ranks splitting the layers
  // Disaggregated serving: the tensorrt_llm model becomes the router
  // (serving/disaggregated_backend.h) to the tensorrt_llm models of two other servers, given
  // as host:port of their gRPC endpoints (both or neither).
  std::string context_url, generation_url;
  // The router asks the context phase for its hand-off in a shared-memory segment ("shm") or
  // inline ("inline"); the two workers then name the same context_phase_shm_dir.
  std::string disaggregated_transport = "inline";
  std::string context_phase_shm_dir;  // a worker's folder of hand-off segments (empty: none)
  bool force = false;                 // overwrite an existing folder's configs
  // The model goes into the repository (<out>/weights/, a hard link where the filesystem
  // allows, else a copy) and the configs name it relatively, so the server's confinement of
  // config paths to the repository holds. False: the configs name the model where it is (the
  // server then needs --model-path-allow for its folder).
  bool model_in_repository = true;
};

// INVALID_ARGUMENT / NOT_FOUND naming the path on failure. Every written config is parsed back
// before returning.
Status InitRepository(const InitRepoOptions& options);

}  // namespace inflight::serving
