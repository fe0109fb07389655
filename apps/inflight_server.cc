// inflight-server: a Triton-compatible LLM server (KServe v2 HTTP and gRPC, generate and
// generate_stream, Prometheus metrics) over a model repository of config.pbtxt files.
//   inflight-server --model-repository DIR [--http-port 8000 --grpc-port 8001 --metrics-port 8002]
//   inflight-server init-repo --model MODEL.gguf --out DIR
// Every flag can also come from a config file (--config-file, TOML/INI) or the environment
// (INFLIGHT_HTTP_PORT, ...).
#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <thread>

#include "base/logging.h"
#include "frontends/grpc_frontend.h"
#include "frontends/http_frontend.h"
#include "serving/init_repo.h"
#include "serving/server.h"

using namespace inflight;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "inflight-server: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"inflight-server: Triton-compatible in-flight batching LLM server for CPUs"};
  app.set_config("--config-file", "", "TOML/INI file with any of the flags below");
  serving::ServerOptions so;
  std::string control_mode = "none", http_address = "0.0.0.0", grpc_address = "0.0.0.0", metrics_address = "0.0.0.0";
  int http_port = 8000, grpc_port = 8001, metrics_port = 8002, log_verbose = 0;
  frontends::HttpServerOptions ho;
  int64_t http_header_timeout_ms = ho.header_timeout.count(), http_idle_timeout_ms = ho.idle_timeout.count(),
          http_body_timeout_ms = ho.body_timeout.count(), http_write_timeout_ms = ho.write_timeout.count();
  bool allow_http = true, allow_grpc = true, allow_metrics = true;
  app.add_option("--model-repository", so.repository, "Model repository folder")->envname("INFLIGHT_MODEL_REPOSITORY");
  app.add_option("--http-port", http_port, "KServe HTTP port (0: any free port)")->envname("INFLIGHT_HTTP_PORT");
  app.add_option("--grpc-port", grpc_port, "KServe gRPC port (0: any free port)")->envname("INFLIGHT_GRPC_PORT");
  app.add_option("--metrics-port", metrics_port, "Prometheus port (0: any free port)")->envname("INFLIGHT_METRICS_PORT");
  app.add_option("--http-address", http_address)->envname("INFLIGHT_HTTP_ADDRESS");
  app.add_option("--grpc-address", grpc_address)->envname("INFLIGHT_GRPC_ADDRESS");
  app.add_option("--metrics-address", metrics_address)->envname("INFLIGHT_METRICS_ADDRESS");
  app.add_option("--http-thread-count", ho.num_threads, "HTTP I/O threads (connections and streams do not hold one)")
      ->envname("INFLIGHT_HTTP_THREAD_COUNT")->check(CLI::Range(1, 256));
  app.add_option("--http-max-connections", ho.max_connections, "Open HTTP connections beyond which new ones are closed")
      ->envname("INFLIGHT_HTTP_MAX_CONNECTIONS")->check(CLI::Range(1, 1 << 20));
  app.add_option("--http-max-header-bytes", ho.max_header_bytes, "Largest request line + headers (431 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_HEADER_BYTES")->check(CLI::Range(1024, 1 << 24));
  app.add_option("--http-max-header-count", ho.max_header_count, "Most request headers (431 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_HEADER_COUNT")->check(CLI::Range(8, 100000));
  app.add_option("--http-max-body-bytes", ho.max_body_bytes, "Largest request body (400 beyond)")
      ->envname("INFLIGHT_HTTP_MAX_BODY_BYTES")->check(CLI::Range(1024LL, 1LL << 34));
  app.add_option("--http-header-timeout-ms", http_header_timeout_ms, "From a request's first byte to the end of its headers")
      ->envname("INFLIGHT_HTTP_HEADER_TIMEOUT_MS")->check(CLI::Range(1, 3600000));
  app.add_option("--http-body-timeout-ms", http_body_timeout_ms, "For a request's body")
      ->envname("INFLIGHT_HTTP_BODY_TIMEOUT_MS")->check(CLI::Range(1, 3600000));
  app.add_option("--http-idle-timeout-ms", http_idle_timeout_ms, "Keep-alive connection with no request")
      ->envname("INFLIGHT_HTTP_IDLE_TIMEOUT_MS")->check(CLI::Range(1, 86400000));
  app.add_option("--http-write-timeout-ms", http_write_timeout_ms,
                 "A response write that makes no progress this long ends the connection (and cancels its request)")
      ->envname("INFLIGHT_HTTP_WRITE_TIMEOUT_MS")->check(CLI::Range(1, 3600000));
  app.add_option("--http-max-stream-buffer-bytes", ho.max_stream_buffer_bytes,
                 "Unread output a stream (HTTP SSE or gRPC ModelStreamInfer) may hold; beyond it its requests are cancelled with an error")
      ->envname("INFLIGHT_HTTP_MAX_STREAM_BUFFER_BYTES")->check(CLI::Range(4096LL, 1LL << 34));
  app.add_option("--allow-http", allow_http)->envname("INFLIGHT_ALLOW_HTTP");
  app.add_option("--allow-grpc", allow_grpc)->envname("INFLIGHT_ALLOW_GRPC");
  app.add_option("--allow-metrics", allow_metrics)->envname("INFLIGHT_ALLOW_METRICS");
  app.add_option("--model-control-mode", control_mode, "none, poll or explicit")->envname("INFLIGHT_MODEL_CONTROL_MODE");
  app.add_option("--load-model", so.load_models, "Model to load at start in explicit mode ('*': all)")
      ->envname("INFLIGHT_LOAD_MODEL");
  app.add_option("--repository-poll-secs", so.repository_poll_secs)->envname("INFLIGHT_REPOSITORY_POLL_SECS")
      ->check(CLI::Range(1, 86400));
  app.add_option("--log-verbose", log_verbose, "0: info, 1 or more: debug")->envname("INFLIGHT_LOG_VERBOSE");
  app.add_option("--trace-file", so.trace_file, "File for request traces (trace extension; settings over HTTP/gRPC)")
      ->envname("INFLIGHT_TRACE_FILE");
  std::string chat_template_path;
  app.add_option("--chat-template", chat_template_path, "A Jinja chat template file used for every model's chat requests "
                 "instead of the model's own")->envname("INFLIGHT_CHAT_TEMPLATE");
  app.add_option("--model-path-allow", so.allowed_model_paths,
                 "A folder outside the repository whose files model configs may name (repeatable); every other "
                 "path a config names must lie inside the repository")->envname("INFLIGHT_MODEL_PATH_ALLOW");
  app.add_option("--exit-timeout-secs", so.exit_timeout_secs, "Time running requests get at shutdown")
      ->envname("INFLIGHT_EXIT_TIMEOUT_SECS")->check(CLI::Range(0, 86400));

  serving::InitRepoOptions init;
  CLI::App* init_cmd = app.add_subcommand("init-repo", "Write a ready model repository for a model");
  init_cmd->add_option("--model", init.model_path, "GGUF file or Hugging Face folder")->required();
  init_cmd->add_option("--out", init.out_dir, "Repository folder to write")->required();
  init_cmd->add_option("--max-batch-size", init.max_batch_size)->check(CLI::Range(1, 4096));
  init_cmd->add_option("--batching-strategy", init.batching_strategy, "inflight_fused_batching or V1");
  init_cmd->add_option("--batch-scheduler-policy", init.scheduler_policy, "guaranteed_no_evict or max_utilization");
  init_cmd->add_option("--max-num-tokens", init.max_num_tokens)->check(CLI::Range(16, 1 << 20));
  init_cmd->add_option("--max-queue-size", init.max_queue_size)->check(CLI::Range(0, 1 << 30));
  init_cmd->add_option("--kv-cache-free-mem-fraction", init.kv_cache_free_mem_fraction)->check(CLI::Range(0.01, 1.0));
  init_cmd->add_option("--decoupled", init.decoupled, "Decoupled tensorrt_llm (streaming)");
  init_cmd->add_option("--enable-chunked-context", init.enable_chunked_context);
  init_cmd->add_option("--enable-kv-cache-reuse", init.enable_kv_cache_reuse);
  init_cmd->add_option("--exclude-input-in-output", init.exclude_input_in_output);
  init_cmd->add_flag("--force", init.force, "Overwrite an existing repository's configs");
  bool model_in_place = false;
  init_cmd->add_flag("--model-in-place", model_in_place,
                     "Name the model where it is instead of linking it into <out>/weights (the server then needs "
                     "--model-path-allow for its folder)");
  CLI11_PARSE(app, argc, argv);

  init.model_in_repository = !model_in_place;
  if (*init_cmd) {
    Status s = serving::InitRepository(init);
    if (!s.ok()) return Fail(s);
    std::printf("wrote model repository %s (preprocessing, tensorrt_llm, postprocessing, ensemble, tensorrt_llm_bls)\n",
                init.out_dir.c_str());
    return 0;
  }
  if (so.repository.empty()) return Fail(InvalidArgumentError("--model-repository is required"));
  SetLogLevel(log_verbose > 0 ? LogLevel::kDebug : LogLevel::kInfo);
  auto mode = serving::ModelControlModeFromName(control_mode);
  if (!mode.ok()) return Fail(mode.status());
  so.control_mode = *mode;

  frontends::OpenAiOptions openai;
  if (!chat_template_path.empty()) {
    std::ifstream in(chat_template_path, std::ios::binary);
    if (!in) return Fail(NotFoundError("--chat-template: cannot open '" + chat_template_path + "'"));
    openai.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto server = serving::Server::Create(so);
  if (!server.ok()) return Fail(server.status());
  frontends::SharedMemoryRegistry shared_memory;  // both protocols see the same regions
  std::unique_ptr<frontends::HttpFrontend> http;
  std::unique_ptr<frontends::GrpcFrontend> grpc;
  std::unique_ptr<frontends::MetricsFrontend> metrics;
  if (allow_grpc) {
    grpc = std::make_unique<frontends::GrpcFrontend>(server->get(), grpc_address, grpc_port, &shared_memory,
                                                   ho.max_stream_buffer_bytes);
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
    http = std::make_unique<frontends::HttpFrontend>(server->get(), ho, &shared_memory, openai);
    auto port = http->Start();
    if (!port.ok()) return Fail(port.status());
    INFLIGHT_LOG(kInfo) << "Started HTTPService at " << http_address << ":" << *port;
  }
  if (allow_metrics) {
    metrics = std::make_unique<frontends::MetricsFrontend>(server->get(), metrics_address, metrics_port);
    auto port = metrics->Start();
    if (!port.ok()) return Fail(port.status());
    INFLIGHT_LOG(kInfo) << "Started Metrics Service at " << metrics_address << ":" << *port;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  INFLIGHT_LOG(kInfo) << "signal " << sig << ": waiting up to " << so.exit_timeout_secs
                      << " s for " << (*server)->num_inflight() << " running requests";
  // Stop taking connections, let running requests finish within the exit timeout (the
  // server then ends the rest with an error each stream reports), give the last events a
  // moment to leave, and close whatever is still open: the exit never waits on a client.
  if (http) http->StopAccepting();
  if (grpc) grpc->SetNotServing();
  (*server)->Shutdown();
  if (http) http->Stop(std::chrono::milliseconds(500));
  if (grpc) grpc->Stop();
  if (metrics) metrics->Stop();
  INFLIGHT_LOG(kInfo) << "exiting";
  return 0;
}
