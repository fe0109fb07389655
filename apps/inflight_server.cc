// inflight-server: a Triton-compatible LLM server (KServe v2 HTTP and gRPC, generate and
// generate_stream, Prometheus metrics) over a model repository of config.pbtxt files.
//   inflight-server --model-repository DIR [--http-port 8000 --grpc-port 8001 --metrics-port 8002]
//   inflight-server init-repo --model MODEL.gguf --out DIR
// Every flag can also come from a config file (--config-file, TOML/INI) or the environment
// (INFLIGHT_HTTP_PORT, ...).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "backends/llm/init_repo.h"
#include "backends/llm/llm_backend.h"
#include "base/logging.h"
#include "engine/lookahead.h"
#include "frontends/grpc_frontend.h"
#include "frontends/http_frontend.h"
#include "parallel/mpi_process.h"
#include "serving/server.h"

using namespace inflight;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "inflight-server: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

// A server that runs for weeks and loads, reloads and unloads models: a fixed mmap threshold
// hands freed weights and buffers back to the system at once (glibc's grows with the first
// large free, after which they stay in the heap), and few arenas keep freed memory from
// scattering across threads. bench/soak: RSS crept 12% over 56 reloads in 10 minutes without
// these, and stayed flat with them at the same request rate.
void TuneAllocator() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_ARENA_MAX, static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u)));
#endif
}

int main(int argc, char** argv) {
  TuneAllocator();
  CLI::App app{"inflight-server: Triton-compatible in-flight batching LLM server for CPUs"};
  app.set_config("--config-file", "", "TOML/INI file with any of the flags below");
  serving::ServerOptions so;
  std::string control_mode = "none", http_address = "0.0.0.0", grpc_address = "0.0.0.0",
              metrics_address = "0.0.0.0";
  int http_port = 8000, grpc_port = 8001, metrics_port = 8002, log_verbose = 0;
  frontends::HttpServerOptions ho;
  int64_t http_header_timeout_ms = ho.header_timeout.count(),
          http_idle_timeout_ms = ho.idle_timeout.count(),
          http_body_timeout_ms = ho.body_timeout.count(),
          http_write_timeout_ms = ho.write_timeout.count();
  bool allow_http = true, allow_grpc = true, allow_metrics = true;
  app.add_option("--model-repository", so.repository, "Model repository folder")
      ->envname("INFLIGHT_MODEL_REPOSITORY");
  app.add_option("--http-port", http_port, "KServe HTTP port (0: any free port)")
      ->envname("INFLIGHT_HTTP_PORT");
  std::string grpc_compression = "none";
  bool grpc_allow_compression = false;
  app.add_flag("--grpc-allow-compression", grpc_allow_compression,
               "Accept gzip/deflate-compressed gRPC requests and compress responses at "
               "--grpc-infer-response-compression-level. Off by default: the gRPC library "
               "inflates a compressed request without bounding its inflated size, so allow it "
               "only for trusted clients")
      ->envname("INFLIGHT_GRPC_ALLOW_COMPRESSION");
  app.add_option("--grpc-infer-response-compression-level", grpc_compression,
                 "Compress gRPC responses (Triton's option): none, low, medium or high, with "
                 "gzip or deflate as the client accepts")
      ->envname("INFLIGHT_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL")
      ->check(CLI::IsMember({"none", "low", "medium", "high"}))
      ->capture_default_str();
  app.add_option("--grpc-port", grpc_port, "KServe gRPC port (0: any free port)")
      ->envname("INFLIGHT_GRPC_PORT");
  app.add_option("--metrics-port", metrics_port, "Prometheus port (0: any free port)")
      ->envname("INFLIGHT_METRICS_PORT");
  app.add_option("--http-address", http_address)->envname("INFLIGHT_HTTP_ADDRESS");
  app.add_option("--grpc-address", grpc_address)->envname("INFLIGHT_GRPC_ADDRESS");
  app.add_option("--metrics-address", metrics_address)->envname("INFLIGHT_METRICS_ADDRESS");
  app.add_option("--http-thread-count", ho.num_threads,
                 "HTTP I/O threads (connections and streams do not hold one)")
      ->envname("INFLIGHT_HTTP_THREAD_COUNT")
      ->check(CLI::Range(1, 256));
  app.add_option("--http-max-connections", ho.max_connections,
                 "Open HTTP connections beyond which new ones are closed")
      ->envname("INFLIGHT_HTTP_MAX_CONNECTIONS")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-max-header-bytes", ho.max_header_bytes,
                 "Largest request line + headers (431 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_HEADER_BYTES")
      ->check(CLI::Range(1024, 1 << 24));
  app.add_option("--http-max-header-count", ho.max_header_count,
                 "Most request headers (431 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_HEADER_COUNT")
      ->check(CLI::Range(8, 100000));
  app.add_option("--http-max-body-bytes", ho.max_body_bytes, "Largest request body (400 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_BODY_BYTES")
      ->check(CLI::Range(1024LL, 1LL << 34));
  app.add_option("--http-header-timeout-ms", http_header_timeout_ms,
                 "From a request's first byte to the end of its headers")
      ->envname("INFLIGHT_HTTP_HEADER_TIMEOUT_MS")
      ->check(CLI::Range(1, 3600000));
  app.add_option("--http-body-timeout-ms", http_body_timeout_ms, "For a request's body")
      ->envname("INFLIGHT_HTTP_BODY_TIMEOUT_MS")
      ->check(CLI::Range(1, 3600000));
  app.add_option("--http-idle-timeout-ms", http_idle_timeout_ms,
                 "Keep-alive connection with no request")
      ->envname("INFLIGHT_HTTP_IDLE_TIMEOUT_MS")
      ->check(CLI::Range(1, 86400000));
  app.add_option("--http-write-timeout-ms", http_write_timeout_ms,
                 "A response write that makes no progress this long ends the connection (and "
                 "cancels its request)")
      ->envname("INFLIGHT_HTTP_WRITE_TIMEOUT_MS")
      ->check(CLI::Range(1, 3600000));
  app.add_option("--http-max-stream-buffer-bytes", ho.max_stream_buffer_bytes,
                 "Unread output a stream (HTTP SSE or gRPC ModelStreamInfer) may hold; beyond it "
                 "its requests are cancelled with an error")
      ->envname("INFLIGHT_HTTP_MAX_STREAM_BUFFER_BYTES")
      ->check(CLI::Range(4096LL, 1LL << 34));
  app.add_option("--allow-http", allow_http)->envname("INFLIGHT_ALLOW_HTTP");
  app.add_option("--allow-grpc", allow_grpc)->envname("INFLIGHT_ALLOW_GRPC");
  app.add_option("--allow-metrics", allow_metrics)->envname("INFLIGHT_ALLOW_METRICS");
  app.add_option("--model-control-mode", control_mode, "none, poll or explicit")
      ->envname("INFLIGHT_MODEL_CONTROL_MODE");
  app.add_option("--load-model", so.load_models,
                 "Model to load at start in explicit mode ('*': all)")
      ->envname("INFLIGHT_LOAD_MODEL");
  app.add_option("--repository-poll-secs", so.repository_poll_secs)
      ->envname("INFLIGHT_REPOSITORY_POLL_SECS")
      ->check(CLI::Range(1, 86400));
  app.add_option("--log-verbose", log_verbose, "0: info, 1 or more: debug")
      ->envname("INFLIGHT_LOG_VERBOSE");
  app.add_option("--trace-file", so.trace_file,
                 "File for request traces (trace extension; settings over HTTP/gRPC)")
      ->envname("INFLIGHT_TRACE_FILE");
  std::string chat_template_path;
  app.add_option("--chat-template", chat_template_path,
                 "A Jinja chat template file used for every model's chat requests "
                 "instead of the model's own")
      ->envname("INFLIGHT_CHAT_TEMPLATE");
  app.add_option("--model-path-allow", so.allowed_model_paths,
                 "A folder outside the repository whose files model configs may name (repeatable); "
                 "every other "
                 "path a config names must lie inside the repository")
      ->envname("INFLIGHT_MODEL_PATH_ALLOW");
  app.add_option("--exit-timeout-secs", so.exit_timeout_secs,
                 "Time running requests get at shutdown")
      ->envname("INFLIGHT_EXIT_TIMEOUT_SECS")
      ->check(CLI::Range(0, 86400));

  // Running it on a network: keys, restricted groups, TLS, tenant limits.
  std::vector<std::string> api_keys, admin_keys, http_restricted, grpc_restricted;
  std::string api_key_file, admin_key_file,
      admin_api = "model-repository,shared-memory,statistics,trace,logging,metrics";
  app.add_option(
         "--api-key", api_keys,
         "A key every request must bring as 'Authorization: Bearer KEY' (HTTP, OpenAI) or "
         "'authorization' metadata (gRPC); repeatable, or comma-separated in INFLIGHT_API_KEY")
      ->envname("INFLIGHT_API_KEY")
      ->delimiter(',');
  app.add_option("--api-key-file", api_key_file,
                 "File of keys, one 'KEY [TENANT]' per line ('#' comments)")
      ->envname("INFLIGHT_API_KEY_FILE");
  app.add_option("--admin-key", admin_keys,
                 "A key that also opens the admin API groups; repeatable (INFLIGHT_ADMIN_KEY)")
      ->envname("INFLIGHT_ADMIN_KEY")
      ->delimiter(',');
  app.add_option("--admin-key-file", admin_key_file, "File of admin keys, as --api-key-file")
      ->envname("INFLIGHT_ADMIN_KEY_FILE");
  app.add_option("--admin-api", admin_api,
                 "API groups a public key cannot call when keys are set ('none': all open to it)")
      ->envname("INFLIGHT_ADMIN_API")
      ->capture_default_str();
  bool api_key_health = false;
  app.add_flag("--api-key-health", api_key_health,
               "With keys: /v2/health/live|ready, gRPC ServerLive/ServerReady and "
               "grpc.health.v1 need a key too (default: open, for Kubernetes probes)")
      ->envname("INFLIGHT_API_KEY_HEALTH");
  app.add_option("--http-restricted-api", http_restricted,
                 "GROUPS:HEADER=VALUE: those groups need that header over HTTP "
                 "(Triton's option; groups: health, metadata, inference, shared-memory, "
                 "model-config, model-repository, "
                 "statistics, trace, logging, metrics)")
      ->envname("INFLIGHT_HTTP_RESTRICTED_API");
  app.add_option("--grpc-restricted-protocol", grpc_restricted,
                 "GROUPS:KEY=VALUE: those groups need that metadata over gRPC")
      ->envname("INFLIGHT_GRPC_RESTRICTED_PROTOCOL");
  frontends::TlsFiles tls, grpc_tls;
  app.add_option("--tls-cert", tls.cert_file, "PEM certificate chain: every port serves TLS only")
      ->envname("INFLIGHT_TLS_CERT");
  app.add_option("--tls-key", tls.key_file, "PEM private key of --tls-cert")
      ->envname("INFLIGHT_TLS_KEY");
  app.add_option("--tls-client-ca", tls.client_ca_file,
                 "PEM CA: clients must present a certificate it signed (mutual TLS)")
      ->envname("INFLIGHT_TLS_CLIENT_CA");
  bool grpc_use_ssl = false, grpc_use_ssl_mutual = false;
  app.add_option("--grpc-use-ssl", grpc_use_ssl,
                 "Triton's gRPC TLS switch (with --grpc-server-cert/--grpc-server-key)");
  app.add_option("--grpc-use-ssl-mutual", grpc_use_ssl_mutual,
                 "Triton's: gRPC clients need a certificate signed by --grpc-root-cert");
  app.add_option("--grpc-server-cert", grpc_tls.cert_file);
  app.add_option("--grpc-server-key", grpc_tls.key_file);
  app.add_option("--grpc-root-cert", grpc_tls.client_ca_file);
  serving::TenantLimitOptions tenant_limits;
  app.add_option("--max-concurrent-per-key", tenant_limits.max_concurrent,
                 "Requests one key (or, without keys, one client address) may have running; 429 "
                 "beyond (0: no limit)")
      ->envname("INFLIGHT_MAX_CONCURRENT_PER_KEY")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-tokens-per-minute-per-key", tenant_limits.tokens_per_minute,
                 "Prompt + generated tokens one key may use per minute; 429 with Retry-After "
                 "beyond (0: no limit)")
      ->envname("INFLIGHT_MAX_TOKENS_PER_MINUTE_PER_KEY")
      ->check(CLI::Range(0LL, 1LL << 40));
  app.add_flag("--cache-salt-per-key", tenant_limits.cache_salt_per_key,
               "Each API key gets a prefix cache of its own (no KV block is shared across keys)")
      ->envname("INFLIGHT_CACHE_SALT_PER_KEY");
  app.add_option("--max-n", so.request_limits.max_n,
                 "Most choices / return sequences one request may ask for")
      ->envname("INFLIGHT_MAX_N")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-logprobs", so.request_limits.max_logprobs,
                 "Most top log-probs per token one request may ask for")
      ->envname("INFLIGHT_MAX_LOGPROBS")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  app.add_option("--max-prompt-tokens", so.request_limits.max_prompt_tokens,
                 "Longest prompt in tokens (0: the model's context)")
      ->envname("INFLIGHT_MAX_PROMPT_TOKENS")
      ->check(CLI::Range(0LL, 1LL << 30));
  app.add_option("--max-stop-words", so.request_limits.max_stop_words,
                 "Most stop words / stop strings per request")
      ->envname("INFLIGHT_MAX_STOP_WORDS")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));

  serving::InitRepoOptions init;
  CLI::App* init_cmd =
      app.add_subcommand("init-repo", "Write a ready model repository for a model");
  init_cmd->add_option("--model", init.model_path, "GGUF file or Hugging Face folder")->required();
  init_cmd->add_option("--out", init.out_dir, "Repository folder to write")->required();
  init_cmd->add_option("--max-batch-size", init.max_batch_size)->check(CLI::Range(1, 4096));
  init_cmd->add_option("--batching-strategy", init.batching_strategy,
                       "inflight_fused_batching or V1");
  init_cmd->add_option("--batch-scheduler-policy", init.scheduler_policy,
                       "guaranteed_no_evict or max_utilization");
  init_cmd->add_option("--max-num-tokens", init.max_num_tokens)->check(CLI::Range(16, 1 << 20));
  init_cmd->add_option("--max-queue-size", init.max_queue_size)->check(CLI::Range(0, 1 << 30));
  init_cmd->add_option("--kv-cache-free-mem-fraction", init.kv_cache_free_mem_fraction)
      ->check(CLI::Range(0.01, 1.0));
  init_cmd->add_option("--decoupled", init.decoupled, "Decoupled tensorrt_llm (streaming)");
  init_cmd->add_option("--enable-chunked-context", init.enable_chunked_context);
  init_cmd
      ->add_option("--max-inter-token-latency-ms", init.max_inter_token_latency_ms,
                   "Target time between a running sequence's tokens while prompts arrive "
                   "(0: auto, twice the decode step; -1: off)")
      ->check(CLI::Range(-1.0, 3.6e6));
  init_cmd->add_option("--enable-kv-cache-reuse", init.enable_kv_cache_reuse);
  init_cmd
      ->add_option("--kv-cache-dtype", init.kv_cache_dtype,
                   "K/V in the cache: f16, bf16, f32 or int8 (8 bits with a scale per token and "
                   "head: twice the tokens in the same memory, half the bytes read per step)")
      ->check(CLI::IsMember({"f16", "bf16", "f32", "int8"}));
  init_cmd->add_option("--kv-cache-disk-path", init.kv_cache_disk_path,
                       "Directory of the KV cache's disk tier: reusable prompt blocks written "
                       "behind, read back after evictions and restarts (relative: to the model's "
                       "folder; inside the repository or an allowed model path)");
  init_cmd
      ->add_option("--kv-cache-disk-bytes", init.kv_cache_disk_bytes,
                   "Size bound of the disk tier (least recently used blocks go first)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  init_cmd
      ->add_option("--kv-event-buffer-size", init.kv_event_buffer_size,
                   "KV cache events kept for routers (GET /v2/models/M/kv_events; 0: off)")
      ->check(CLI::Range(0, 1 << 22));
  init_cmd->add_option("--exclude-input-in-output", init.exclude_input_in_output);
  init_cmd
      ->add_option(
          "--speculative-decoding-mode", init.speculative_decoding_mode,
          "none, prompt_lookup (drafts from earlier occurrences of the last n-gram), draft_model "
          "or lookahead (Jacobi guesses and an n-gram pool verified as a tree; "
          "--lookahead-config W,N,G)")
      ->check(CLI::IsMember({"none", "prompt_lookup", "draft_model", "lookahead"}));
  init_cmd
      ->add_option("--lookahead-config", init.lookahead_config,
                   "lookahead: window size, n-gram size, verification set size (the requests' "
                   "largest), e.g. 4,3,4")
      ->check([](const std::string& v) {
        int w = 0, n = 0, g = 0;
        char extra = 0;
        if (std::sscanf(v.c_str(), "%d,%d,%d%c", &w, &n, &g, &extra) != 3)
          return std::string("expected W,N,G (three whole numbers)");
        const Status st = LookaheadConfig{w, n, g}.Validate("lookahead_");
        return st.ok() ? std::string() : st.message();
      });
  init_cmd->add_option("--draft-model", init.draft_model_path,
                       "draft_model: a smaller model of the same vocabulary (default: the model)");
  init_cmd
      ->add_option("--draft-model-layers", init.draft_model_layers,
                   "draft_model: use only the draft's first n layers (0: all), e.g. the model's "
                   "own first layers")
      ->check(CLI::Range(0, 1 << 16));
  init_cmd
      ->add_option(
          "--tensor-parallel-size", init.tensor_parallel_size,
          "MPI ranks that split each layer (heads, FFN columns; leader or orchestrator mode)")
      ->check(CLI::Range(1, 256));
  init_cmd
      ->add_option("--moe-ep-size", init.moe_ep_size,
                   "Expert parallelism: groups of the tensor-parallel ranks that each hold a "
                   "share of the experts (moe_ep_size x moe_tp_size = tensor_parallel_size; 0: "
                   "derived)")
      ->check(CLI::Range(0, 256));
  init_cmd->add_option(
      "--disaggregated-context-url", init.context_url,
      "Disaggregated serving: tensorrt_llm routes each request's context phase to the "
      "tensorrt_llm model of the server at this host:port (its gRPC endpoint)");
  init_cmd->add_option(
      "--disaggregated-generation-url", init.generation_url,
      "Disaggregated serving: ... and its generation phase to the server at this host:port");
  init_cmd
      ->add_option("--disaggregated-transport", init.disaggregated_transport,
                   "Disaggregated serving: how the K/V goes from the context server to the "
                   "generation server: inline (in the gRPC responses, through this router) or "
                   "shm (a shared-memory segment of their --context-phase-shm-dir; same host)")
      ->check(CLI::IsMember({"inline", "shm"}));
  init_cmd->add_option(
      "--context-phase-shm-dir", init.context_phase_shm_dir,
      "Disaggregated serving, on a worker: the folder (tmpfs, e.g. under /dev/shm; inside the "
      "repository or an allowed model path) of the hand-off segments a router's shm transport "
      "uses; context and generation servers name the same one");
  init_cmd
      ->add_option("--moe-tp-size", init.moe_tp_size,
                   "Ranks of an expert-parallel group that split each expert's columns (0: "
                   "derived)")
      ->check(CLI::Range(0, 256));
  init_cmd
      ->add_option("--pipeline-parallel-size", init.pipeline_parallel_size,
                   "MPI ranks that split the layers into stages")
      ->check(CLI::Range(1, 256));
  init_cmd
      ->add_option("--max-beam-width", init.max_beam_width,
                   "Widest beam search a request may ask for (beam_width)")
      ->check(CLI::Range(1, 64));
  init_cmd
      ->add_option("--max-draft-len", init.max_draft_len,
                   "Draft tokens verified per step and sequence")
      ->check(CLI::Range(0, 32));
  init_cmd->add_flag("--force", init.force, "Overwrite an existing repository's configs");
  bool model_in_place = false;
  init_cmd->add_flag(
      "--model-in-place", model_in_place,
      "Name the model where it is instead of linking it into <out>/weights (the server then needs "
      "--model-path-allow for its folder)");
  bool parallel_worker = false;
  app.add_flag("--parallel-worker", parallel_worker,
               "Internal: run as a tensor/pipeline-parallel worker spawned by a server in "
               "orchestrator mode");
  CLI11_PARSE(app, argc, argv);
  if (parallel_worker) {
    // Orchestrator mode: follow the parent's model, then exit (no MPI_Finalize after a failure).
    const Status s = parallel::RunSpawnedWorker();
    if (!s.ok()) {
      std::fprintf(stderr, "inflight-server worker: %s\n", s.message().c_str());
      std::_Exit(1);
    }
    parallel::FinalizeMpi(false);
    return 0;
  }

  init.model_in_repository = !model_in_place;
  if (*init_cmd) {
    Status s = serving::InitRepository(init);
    if (!s.ok()) return Fail(s);
    std::printf(
        "wrote model repository %s (preprocessing, tensorrt_llm, postprocessing, ensemble, "
        "tensorrt_llm_bls)\n",
        init.out_dir.c_str());
    return 0;
  }
  if (so.repository.empty()) return Fail(InvalidArgumentError("--model-repository is required"));
  SetLogLevel(log_verbose > 0 ? LogLevel::kDebug : LogLevel::kInfo);
  auto mode = serving::ModelControlModeFromName(control_mode);
  if (!mode.ok()) return Fail(mode.status());
  so.control_mode = *mode;

  // The access policy every port applies.
  serving::AuthOptions auth;
  for (const std::string& k : api_keys) {
    if (!k.empty()) auth.api_keys.push_back({k, ""});
  }
  for (const std::string& k : admin_keys) {
    if (!k.empty()) auth.admin_keys.push_back({k, ""});
  }
  if (!api_key_file.empty()) {
    auto keys = serving::ReadApiKeyFile(api_key_file);
    if (!keys.ok()) return Fail(keys.status());
    auth.api_keys.insert(auth.api_keys.end(), keys->begin(), keys->end());
  }
  if (!admin_key_file.empty()) {
    auto keys = serving::ReadApiKeyFile(admin_key_file);
    if (!keys.ok()) return Fail(keys.status());
    auth.admin_keys.insert(auth.admin_keys.end(), keys->begin(), keys->end());
  }
  auto admin_groups = serving::ParseApiGroups(admin_api);
  if (!admin_groups.ok())
    return Fail(InvalidArgumentError("--admin-api: " + admin_groups.status().message()));
  auth.admin_groups = *admin_groups;
  auth.health_needs_key = api_key_health;
  for (const auto& [specs, out] : {std::pair{&http_restricted, &auth.http_restricted},
                                   std::pair{&grpc_restricted, &auth.grpc_restricted}}) {
    for (const std::string& spec : *specs) {
      auto r = serving::ParseRestrictedApi(spec);
      if (!r.ok()) return Fail(r.status());
      out->push_back(std::move(r).value());
    }
  }
  frontends::AccessPolicy access;
  access.auth = std::make_shared<serving::Authenticator>(auth);
  access.limits = std::make_shared<serving::TenantLimits>(tenant_limits);
  access.request_limits = so.request_limits;
  if (!grpc_use_ssl) grpc_tls = tls;
  if (grpc_use_ssl && !grpc_use_ssl_mutual) grpc_tls.client_ca_file.clear();
  if (auth.api_keys.empty() && auth.admin_keys.empty() && auth.http_restricted.empty()) {
    INFLIGHT_LOG(kInfo) << "no API keys: every endpoint is open to anyone who can reach the ports";
  }

  frontends::OpenAiOptions openai;
  if (!chat_template_path.empty()) {
    std::ifstream in(chat_template_path, std::ios::binary);
    if (!in)
      return Fail(NotFoundError("--chat-template: cannot open '" + chat_template_path + "'"));
    openai.chat_template.assign(std::istreambuf_iterator<char>(in),
                                std::istreambuf_iterator<char>());
  }

  // Signals are taken by sigwait below; block them before any thread starts (MPI's too).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Leader mode (mpirun -np N inflight-server ...): rank 0 serves; the others follow the
  // parallel model it loads, then exit.
  if (parallel::LaunchedByMpirun()) {
    if (Status s = parallel::InitMpi(); !s.ok()) return Fail(s);
    if (parallel::WorldRank() != 0) {
      pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
      const Status s = parallel::RunWorldFollower();
      if (!s.ok()) {
        std::fprintf(stderr, "inflight-server rank %d: %s\n", parallel::WorldRank(),
                     s.message().c_str());
        std::_Exit(1);
      }
      parallel::FinalizeMpi(false);
      return 0;
    }
  }
  const bool leader_mode = parallel::MpiInitialized() && parallel::WorldSize() > 1;

  so.backends = serving::LlmBackendFactories();
  auto server = serving::Server::Create(so);
  if (leader_mode && (!server.ok() || (!parallel::WorldClaimed() &&
                                       so.control_mode != serving::ModelControlMode::kExplicit))) {
    parallel::DismissWorldFollowers();
    if (server.ok()) {
      return Fail(FailedPreconditionError("mpirun started " +
                                          std::to_string(parallel::WorldSize()) +
                                          " ranks, but no model of the repository has "
                                          "tensor_parallel_size x pipeline_parallel_size = " +
                                          std::to_string(parallel::WorldSize())));
    }
  }
  if (!server.ok()) return Fail(server.status());
  frontends::SharedMemoryRegistry shared_memory;  // both protocols see the same regions
  std::unique_ptr<frontends::HttpFrontend> http;
  std::unique_ptr<frontends::GrpcFrontend> grpc;
  std::unique_ptr<frontends::MetricsFrontend> metrics;
  if (allow_grpc) {
    grpc = std::make_unique<frontends::GrpcFrontend>(server->get(), grpc_address, grpc_port,
                                                     &shared_memory, ho.max_stream_buffer_bytes,
                                                     access, grpc_tls);
    grpc->set_response_compression_level(grpc_compression == "high"     ? GRPC_COMPRESS_LEVEL_HIGH
                                         : grpc_compression == "medium" ? GRPC_COMPRESS_LEVEL_MED
                                         : grpc_compression == "low"    ? GRPC_COMPRESS_LEVEL_LOW
                                                                        : GRPC_COMPRESS_LEVEL_NONE);
    grpc->set_allow_compression(grpc_allow_compression);
    if (!grpc_allow_compression && grpc_compression != "none") {
      INFLIGHT_LOG(kWarning)
          << "--grpc-infer-response-compression-level " << grpc_compression
          << " has no effect without --grpc-allow-compression: gRPC responses are "
             "not compressed";
    }
    auto port = grpc->Start();
    if (!port.ok()) return Fail(port.status());
    INFLIGHT_LOG(kInfo) << "Started GRPCInferenceService at " << grpc_address << ":" << *port;
  }
  if (allow_http) {
    ho.address = http_address;
    ho.port = http_port;
    ho.header_timeout = std::chrono::milliseconds(http_header_timeout_ms);
    ho.body_timeout = std::chrono::milliseconds(http_body_timeout_ms);
    ho.idle_timeout = std::chrono::milliseconds(http_idle_timeout_ms);
    ho.write_timeout = std::chrono::milliseconds(http_write_timeout_ms);
    ho.tls = tls;
    http = std::make_unique<frontends::HttpFrontend>(server->get(), ho, &shared_memory, openai,
                                                     access);
    auto port = http->Start();
    if (!port.ok()) return Fail(port.status());
    INFLIGHT_LOG(kInfo) << "Started HTTPService at " << http_address << ":" << *port;
  }
  if (allow_metrics) {
    metrics = std::make_unique<frontends::MetricsFrontend>(server->get(), metrics_address,
                                                           metrics_port, access, tls);
    auto port = metrics->Start();
    if (!port.ok()) return Fail(port.status());
    INFLIGHT_LOG(kInfo) << "Started Metrics Service at " << metrics_address << ":" << *port;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  INFLIGHT_LOG(kInfo) << "signal " << sig << ": waiting up to " << so.exit_timeout_secs << " s for "
                      << (*server)->num_inflight() << " running requests";
  // Stop taking connections, let running requests finish within the exit timeout (the
  // server then ends the rest with an error each stream reports), give the last events a
  // moment to leave, and close whatever is still open: the exit never waits on a client.
  if (http) http->StopAccepting();
  if (grpc) grpc->SetNotServing();
  (*server)->Shutdown();
  if (http) http->Stop(std::chrono::milliseconds(500));
  if (grpc) grpc->Stop();
  if (metrics) metrics->Stop();
  const bool healthy = !parallel::AnyGroupFailed();
  server->reset();  // models unloaded: parallel followers are free
  if (leader_mode && healthy) parallel::DismissWorldFollowers();
  INFLIGHT_LOG(kInfo) << "exiting";
  if (parallel::MpiInitialized() && !healthy)
    std::_Exit(0);  // MPI_Finalize would wait for a dead rank
  parallel::FinalizeMpi(false);
  return 0;
}
