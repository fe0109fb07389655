// inflight-client: send one request to an LLM server and print the answer, in the manner of
// TensorRT-LLM's inflight_batcher_llm_client: text or token ids, streaming, early stop,
// sampling and output options, several prompts in one request; over HTTP or gRPC.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "clients/llm_client.h"

using namespace inflight;

namespace {

StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX)
      return InvalidArgumentError("'" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return InvalidArgumentError("no token ids given");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"inflight-client: one request to an LLM server (KServe HTTP/gRPC)"};
  std::string protocol = "http", url, model, request_id;
  std::vector<std::string> texts, id_lists;
  clients::GenRequest r;
  int stop_after_ms = 0;
  bool batch_inputs = false, json_out = false, include_input = false;
  double temperature = -1, top_p = -1;
  int64_t top_k = -1, seed = -1, end_id = -1;
  app.add_option("--protocol,-i", protocol, "http or grpc");
  app.add_option("--url,-u", url, "host:port (default localhost:8000, gRPC :8001)");
  app.add_option("--model,-m", model,
                 "Model (default: ensemble for --text over HTTP, tensorrt_llm otherwise)");
  app.add_option("--text", texts, "Prompt text (repeat with --batch-inputs)");
  app.add_option("--input-ids", id_lists,
                 "Prompt token ids, comma separated (repeat with --batch-inputs)");
  app.add_option("--request-output-len,-o", r.max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--streaming", r.streaming, "Print tokens as they come");
  app.add_option("--stop-after-ms", stop_after_ms, "Close the request after this long (streaming)");
  app.add_option("--request-id", request_id);
  app.add_option("--temperature", temperature);
  app.add_option("--top-k", top_k);
  app.add_option("--top-p", top_p);
  app.add_option("--seed", seed);
  app.add_option("--end-id", end_id);
  app.add_flag("--return-log-probs", r.return_log_probs);
  app.add_flag("--return-context-logits", r.return_context_logits);
  app.add_flag("--return-generation-logits", r.return_generation_logits);
  app.add_flag("--batch-inputs", batch_inputs,
               "Send every --text/--input-ids in one request (answers by batch_index)");
  app.add_flag("--include-input", include_input, "Keep the prompt in non-streamed output");
  app.add_flag("--json", json_out, "Print one JSON object per answer");
  std::string api_key;
  app.add_option("--api-key", api_key, "The server's API key (or INFLIGHT_CLIENT_API_KEY)")
      ->envname("INFLIGHT_CLIENT_API_KEY");
  clients::ClientOptions co;
  app.add_flag("--tls", co.tls, "HTTPS / gRPC over TLS");
  app.add_option("--tls-ca", co.tls_ca,
                 "PEM file of the certificates that sign the server's (default: the system's)");
  app.add_option("--tls-cert", co.tls_cert, "This client's certificate (PEM), for mutual TLS");
  app.add_option("--tls-key", co.tls_key, "This client's private key (PEM), for mutual TLS");
  CLI11_PARSE(app, argc, argv);
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "inflight-client: %s\n", m.c_str());
    return 1;
  };
  if (texts.empty() == id_lists.empty()) return fail("give --text or --input-ids (one of them)");
  if (!batch_inputs && texts.size() + id_lists.size() > 1)
    return fail("several prompts need --batch-inputs");
  if (stop_after_ms > 0 && !r.streaming) r.streaming = true;
  auto proto = clients::ProtocolFromName(protocol);
  if (!proto.ok()) return fail(proto.status().message());
  if (Status s = clients::CheckTlsOptions(co); !s.ok()) return fail(s.message());
  co.protocol = *proto;
  co.api_key = api_key;
  if (*proto == clients::Protocol::kGrpc && !texts.empty())
    return fail("gRPC sends token ids: use --input-ids");
  co.model = !model.empty() ? model : (!texts.empty() ? "ensemble" : "tensorrt_llm");
  if (url.empty()) url = *proto == clients::Protocol::kGrpc ? "localhost:8001" : "localhost:8000";
  const size_t colon = url.rfind(':');
  if (colon == std::string::npos) return fail("--url must be host:port");
  co.host = url.substr(0, colon);
  if (co.host == "localhost" && !co.tls)
    co.host = "127.0.0.1";  // TLS checks the name the certificate holds
  co.port = std::atoi(url.c_str() + colon + 1);
  r.id = request_id;
  r.exclude_input_in_output = !include_input;
  if (temperature >= 0) r.temperature = temperature;
  if (top_p > 0) r.top_p = top_p;
  if (top_k >= 0) r.top_k = top_k;
  if (seed >= 0) r.seed = seed;
  if (end_id >= 0) r.end_id = end_id;
  std::vector<std::vector<int32_t>> rows;
  for (const auto& l : id_lists) {
    auto ids = ParseIds(l);
    if (!ids.ok()) return fail(ids.status().message());
    rows.push_back(*ids);
  }
  const size_t num_prompts = texts.size() + rows.size();
  if (num_prompts > 1 && *proto != clients::Protocol::kGrpc) {
    return fail(
        "--batch-inputs with several prompts needs --protocol grpc (the generate endpoint takes "
        "one prompt)");
  }
  if (rows.size() == 1) r.input_ids = rows[0];
  if (rows.size() > 1) r.batch_input_ids = rows;
  if (!texts.empty()) r.text = texts[0];

  auto client = clients::CreateClient(co);
  std::map<int64_t, std::string> text_by_row;
  std::map<int64_t, std::vector<int32_t>> ids_by_row;
  const auto start = clients::Clock::now();
  auto outcome = client->Generate(r, [&](const clients::GenEvent& e) {
    text_by_row[e.batch_index] += e.text;
    auto& ids = ids_by_row[e.batch_index];
    ids.insert(ids.end(), e.token_ids.begin(), e.token_ids.end());
    if (r.streaming && !json_out && num_prompts == 1) {
      if (!e.text.empty()) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      } else {
        for (int32_t id : e.token_ids) std::printf("%d ", id);
      }
      std::fflush(stdout);
    }
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(clients::Clock::now() - start)
            .count();
    return stop_after_ms <= 0 || elapsed < stop_after_ms;
  });
  if (!outcome.status.ok()) return fail(outcome.status.message() + " (" + outcome.error_kind + ")");
  int64_t tokens = 0;
  for (const auto& e : outcome.events) tokens += e.num_tokens;
  if (json_out || num_prompts > 1 || !r.streaming) {
    if (r.streaming && num_prompts == 1 && !json_out) std::printf("\n");
    for (size_t b = 0; b < std::max<size_t>(1, num_prompts); ++b) {
      if (json_out) {
        std::printf("{\"batch_index\": %zu, \"output_ids\": [", b);
        const auto& ids = ids_by_row[b];
        for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
        std::string escaped;
        for (char c : text_by_row[b]) {
          if (c == '"' || c == '\\') escaped += '\\';
          if (c == '\n') {
            escaped += "\\n";
            continue;
          }
          escaped += c;
        }
        std::printf("], \"text\": \"%s\"}\n", escaped.c_str());
      } else {
        if (num_prompts > 1) std::printf("[%zu] ", b);
        if (!text_by_row[b].empty()) {
          std::printf("%s\n", text_by_row[b].c_str());
        } else {
          for (int32_t id : ids_by_row[b]) std::printf("%d ", id);
          std::printf("\n");
        }
      }
    }
  } else {
    std::printf("\n");
  }
  if (outcome.stopped_early) {
    std::fprintf(stderr, "inflight-client: stopped after %d ms with %lld tokens\n", stop_after_ms,
                 static_cast<long long>(tokens));
  }
  return 0;
}
