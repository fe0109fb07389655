// Clients for LLM servers, as the load generator and the command-line client use them: the
// KServe generate/generate_stream endpoints (HTTP), ModelStreamInfer on the tensorrt_llm model
// (gRPC, token ids), and OpenAI /v1/completions (HTTP, SSE). Each call reports every streamed
// event with its arrival time. One client per thread (not thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight::clients {

using Clock = std::chrono::steady_clock;

enum class Protocol {
  kKserveHttp,  // POST /v2/models/{model}/generate[_stream] with text_input (or input_ids)
  kGrpc,        // ModelStreamInfer on a tensorrt_llm-style model: input_ids, request_output_len
  kOpenAi,      // POST /v1/completions (stream: true)
  kOpenAiChat,  // POST /v1/chat/completions, the prompt as one user message
};
StatusOr<Protocol> ProtocolFromName(const std::string& name);  // http|grpc|openai|openai-chat

struct GenRequest {
  std::string id;
  std::string text;                                   // HTTP and OpenAI targets
  std::vector<int32_t> input_ids;                     // gRPC (and HTTP to tensorrt_llm)
  std::vector<std::vector<int32_t>> batch_input_ids;  // gRPC: several prompts in one request
  int32_t max_tokens = 16;
  bool streaming = true;
  bool exclude_input_in_output = true;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k, seed, min_tokens, end_id;
  bool return_log_probs = false, return_context_logits = false, return_generation_logits = false;
};

// One response of the server (a stream event or the whole answer).
struct GenEvent {
  Clock::time_point time;
  int64_t batch_index = 0;
  std::vector<int32_t> token_ids;                    // gRPC / tensorrt_llm outputs
  std::string text;                                  // text outputs
  int64_t num_tokens = 0;                            // tokens this event carries
  std::map<std::string, std::vector<double>> extra;  // other numeric outputs (log-probs, logits)
};

struct GenOutcome {
  Status status;           // not OK: error_kind says which kind
  std::string error_kind;  // connect, http_<code>, grpc_<code>, stream_error, protocol
  Clock::time_point start, end;
  std::vector<GenEvent> events;
  bool stopped_early = false;  // the caller's callback asked to stop
  // The server's own count (an OpenAI stream's usage chunk): a token whose text is not yet
  // complete arrives in no chunk of its own, so chunks undercount.
  std::optional<int64_t> reported_output_tokens;
  int64_t output_tokens() const;
};

struct ClientOptions {
  Protocol protocol = Protocol::kKserveHttp;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model = "ensemble";
  int64_t timeout_ms = 600000;  // whole request
  std::string api_key;  // sent as "Authorization: Bearer" (HTTP) / "authorization" metadata (gRPC)
  // TLS (HTTPS, gRPC over SSL) when set. The server's certificate is checked against tls_ca
  // (PEM; the system's roots when empty); tls_cert / tls_key: this client's certificate and
  // key for mutual TLS.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
};

// INVALID_ARGUMENT naming the file when a TLS file of `o` cannot be read, or a key is given
// without its certificate (or the other way round).
Status CheckTlsOptions(const ClientOptions& o);

class LlmClient {
 public:
  virtual ~LlmClient() = default;
  // Sends one request; `on_event` sees every event as it arrives and may return false to stop
  // (the client closes the stream / cancels the call). Never throws; errors in the outcome.
  virtual GenOutcome Generate(const GenRequest& request,
                              const std::function<bool(const GenEvent&)>& on_event) = 0;
};

std::unique_ptr<LlmClient> CreateClient(const ClientOptions& options);

}  // namespace inflight::clients
