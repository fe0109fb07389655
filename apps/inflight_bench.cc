// inflight-bench: a load generator for LLM servers in the manner of TensorRT-LLM's
// benchmark_core_model and GenAI-Perf. Workloads token-norm-dist, dataset, shared-prefix;
// Poisson or constant arrivals at --request-rate, or a closed loop at --concurrency; targets
// KServe generate_stream (HTTP), ModelStreamInfer on tensorrt_llm (gRPC, token ids) and
// OpenAI /v1/completions. Prints the reference's table plus TTFT and inter-token latency.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include "backends/llm/text_backends.h"
#include "bench/report.h"
#include "bench/workload.h"

using namespace inflight;
using namespace inflight::bench;

namespace {

struct RunOptions {
  clients::ClientOptions client;
  double request_rate = -1;  // <= 0: all at once (or closed loop)
  std::string arrival = "poisson";
  int concurrency = 0;  // > 0: closed loop
  int warmup = 0;
  uint64_t seed = 0;
  bool progress = true;
};

RequestRecord RunOne(clients::LlmClient& client, const BenchItem& item,
                     std::chrono::steady_clock::time_point t0) {
  RequestRecord rec;
  rec.input_tokens = item.input_tokens;
  clients::Clock::time_point prev;
  auto outcome = client.Generate(item.request, [&](const clients::GenEvent&) { return true; });
  rec.start_s = std::chrono::duration<double>(outcome.start - t0).count();
  rec.end_s = std::chrono::duration<double>(outcome.end - t0).count();
  rec.ok = outcome.status.ok();
  rec.error_kind = outcome.error_kind;
  rec.error = outcome.status.message();
  rec.output_tokens = outcome.output_tokens();
  for (size_t i = 0; i < outcome.events.size(); ++i) {
    const auto& e = outcome.events[i];
    if (i == 0) {
      rec.ttft_ms = std::chrono::duration<double, std::milli>(e.time - outcome.start).count();
    } else if (e.num_tokens > 0) {
      rec.itl_ms.push_back(std::chrono::duration<double, std::milli>(e.time - prev).count() /
                           static_cast<double>(e.num_tokens));
    }
    prev = e.time;
  }
  return rec;
}

// Sends every item by the arrival process; one record per item.
std::vector<RequestRecord> Run(const std::vector<BenchItem>& items, const RunOptions& o) {
  std::vector<RequestRecord> records(items.size());
  std::atomic<size_t> next{0}, done{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<bool> finished{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::thread progress;
  if (o.progress && isatty(2)) {
    progress = std::thread([&] {
      while (!finished) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\r  %zu/%zu requests, %.1f output tokens/s   ", done.load(),
                     items.size(), static_cast<double>(tokens.load()) / std::max(s, 1e-9));
      }
      std::fprintf(stderr, "\r%70s\r", "");
    });
  }
  auto finish = [&](size_t i, RequestRecord r) {
    tokens += r.output_tokens;
    records[i] = std::move(r);
    ++done;
  };
  if (o.concurrency > 0 && o.request_rate <= 0) {
    // Closed loop: each worker sends its next request when the previous one ends.
    std::vector<std::thread> workers;
    for (int w = 0; w < o.concurrency; ++w) {
      workers.emplace_back([&] {
        auto client = clients::CreateClient(o.client);
        for (size_t i; (i = next++) < items.size();) finish(i, RunOne(*client, items[i], t0));
      });
    }
    for (auto& t : workers) t.join();
  } else {
    // Open loop: requests leave at their arrival times whatever the server does.
    std::mutex mu;
    std::condition_variable cv;
    std::deque<size_t> due;
    bool closed = false;
    const size_t pool = std::min<size_t>(items.size(), o.concurrency > 0 ? o.concurrency : 512);
    std::vector<std::thread> workers;
    for (size_t w = 0; w < pool; ++w) {
      workers.emplace_back([&] {
        auto client = clients::CreateClient(o.client);
        while (true) {
          size_t i;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return !due.empty() || closed; });
            if (due.empty()) return;
            i = due.front();
            due.pop_front();
          }
          finish(i, RunOne(*client, items[i], t0));
        }
      });
    }
    std::mt19937_64 rng(o.seed + 1);
    std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
    double at = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (o.request_rate > 0) {
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(at)));
        at += o.arrival == "constant" ? 1.0 / o.request_rate : gap(rng);
      }
      std::lock_guard<std::mutex> lock(mu);
      due.push_back(i);
      cv.notify_one();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
  finished = true;
  if (progress.joinable()) progress.join();
  return records;
}

std::vector<double> ParseRates(const std::string& text) {
  std::vector<double> rates;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) rates.push_back(std::stod(item));
  }
  return rates;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"inflight-bench: load generator and benchmark for LLM servers"};
  app.require_subcommand(1);
  RunOptions ro;
  std::string protocol = "http", url, tokenizer_path, json_path, svg_path, sweep;
  WorkloadOptions wo;
  bool json_only = false, allow_early_stop = false;
  ro.client.model.clear();
  app.add_option("--protocol,-i", protocol,
                 "http (KServe generate_stream), grpc (ModelStreamInfer, token ids), openai "
                 "(/v1/completions) or openai-chat (/v1/chat/completions)");
  app.add_option("--url,-u", url, "host:port (default localhost:8000, gRPC :8001)");
  app.add_option("--model,-m", ro.client.model,
                 "Model name (default: ensemble for http, tensorrt_llm for grpc)");
  app.add_option("--api-key", ro.client.api_key,
                 "The server's API key (or INFLIGHT_CLIENT_API_KEY)")
      ->envname("INFLIGHT_CLIENT_API_KEY");
  app.add_flag("--tls", ro.client.tls, "HTTPS / gRPC over TLS");
  app.add_option("--tls-ca", ro.client.tls_ca,
                 "PEM file of the certificates that sign the server's (default: the system's)");
  app.add_option("--tls-cert", ro.client.tls_cert,
                 "This client's certificate (PEM), for mutual TLS");
  app.add_option("--tls-key", ro.client.tls_key, "This client's private key (PEM), for mutual TLS");
  app.add_option("--tokenizer", tokenizer_path,
                 "Tokenizer of the served model (GGUF, HF folder, tokenizer.model)");
  app.add_option("--vocab-size", wo.vocab_size,
                 "Random token ids below this when there is no tokenizer (grpc)");
  app.add_option("--num-requests,-n", wo.num_requests)->check(CLI::Range(1, 10000000));
  app.add_option("--warmup", ro.warmup, "Requests sent first and not measured")
      ->check(CLI::Range(0, 100000));
  app.add_option("--seed", wo.seed);
  app.add_option("--request-rate", ro.request_rate, "Requests/s (<= 0: all at once)");
  app.add_option("--arrival", ro.arrival, "poisson or constant")
      ->check(CLI::IsMember({"poisson", "constant"}));
  app.add_option("--concurrency", ro.concurrency,
                 "Closed loop with this many clients (when no --request-rate)");
  app.add_option("--sweep-rates", sweep, "Comma-separated request rates to run one after another");
  std::string sweep_concurrency;
  int64_t short_input_max = 0;
  app.add_option("--sweep-concurrency", sweep_concurrency,
                 "Comma-separated closed-loop client counts, one run each");
  app.add_option("--short-input-max", short_input_max,
                 "Also report TTFT of requests with prompts up to this long");
  app.add_option("--max-input-len", wo.max_input_len);
  app.add_option("--timeout-ms", ro.client.timeout_ms);
  app.add_option("--json", json_path,
                 "Write the report(s) as JSON to this file ('-': stdout only)");
  app.add_option("--svg", svg_path, "With --sweep-rates: write throughput vs latency as SVG");
  app.add_flag("--no-progress", [&](int64_t) { ro.progress = false; });
  app.add_flag("--allow-early-stop", allow_early_stop,
               "Let requests end at end-of-sequence (default: min_tokens = max_tokens, so lengths "
               "are exact)");
  double in_mean = 128, in_stdev = 0, out_mean = 128, out_stdev = 0, long_fraction = 0;
  int64_t long_input_len = 0;
  auto* norm =
      app.add_subcommand("token-norm-dist", "Prompt and output lengths from normal distributions");
  norm->add_option("--input-mean", in_mean);
  norm->add_option("--input-stdev", in_stdev);
  norm->add_option("--output-mean", out_mean);
  norm->add_option("--output-stdev", out_stdev);
  norm->add_option("--long-fraction", long_fraction,
                   "Share of prompts that get --long-input-len tokens");
  norm->add_option("--long-input-len", long_input_len);
  std::string dataset_file;
  int32_t dataset_out = 128;
  auto* dataset =
      app.add_subcommand("dataset", "Prompts from a JSON list ({prompt, output?, max_tokens?})");
  dataset->add_option("file", dataset_file)->required();
  dataset->add_option("--output-len", dataset_out, "Output length when a record gives none");
  int64_t prefix_len = 256, suffix_len = 32;
  int32_t prefix_out = 64;
  auto* shared =
      app.add_subcommand("shared-prefix", "Prompts sharing a prefix (prefix-cache reuse)");
  shared->add_option("--prefix-len", prefix_len);
  shared->add_option("--suffix-len", suffix_len);
  shared->add_option("--output-len", prefix_out);
  CLI11_PARSE(app, argc, argv);
  json_only = json_path == "-";

  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "inflight-bench: %s\n", m.c_str());
    return 2;
  };
  auto proto = clients::ProtocolFromName(protocol);
  if (!proto.ok()) return fail(proto.status().message());
  ro.client.protocol = *proto;
  if (Status s = clients::CheckTlsOptions(ro.client); !s.ok()) return fail(s.message());
  if (ro.client.model.empty())
    ro.client.model = *proto == clients::Protocol::kGrpc ? "tensorrt_llm" : "ensemble";
  if (url.empty()) url = *proto == clients::Protocol::kGrpc ? "localhost:8001" : "localhost:8000";
  const size_t colon = url.rfind(':');
  if (colon == std::string::npos) return fail("--url must be host:port");
  ro.client.host = url.substr(0, colon);
  if (ro.client.host == "localhost" && !ro.client.tls)
    ro.client.host = "127.0.0.1";  // TLS checks the name the certificate holds
  ro.client.port = std::atoi(url.c_str() + colon + 1);
  ro.seed = wo.seed;
  wo.token_ids = *proto == clients::Protocol::kGrpc;
  std::shared_ptr<const Tokenizer> tok;
  if (!tokenizer_path.empty()) {
    auto t = serving::LoadTokenizer(tokenizer_path);
    if (!t.ok()) return fail(t.status().message());
    tok = *t;
  }
  PromptMaker maker(tok.get(), wo.vocab_size, wo.seed);
  const int64_t wanted = wo.num_requests;
  wo.num_requests = wanted + ro.warmup;
  StatusOr<std::vector<BenchItem>> items = InvalidArgumentError("no workload");
  if (*norm)
    items = TokenNormDist(maker, wo, in_mean, in_stdev, out_mean, out_stdev, long_fraction,
                          long_input_len);
  if (*dataset) items = Dataset(dataset_file, tok.get(), wo, dataset_out);
  if (*shared) items = SharedPrefix(maker, wo, prefix_len, suffix_len, prefix_out);
  if (!items.ok()) return fail(items.status().message());
  if (!allow_early_stop) {
    for (auto& item : *items) item.request.min_tokens = item.request.max_tokens;
  }
  std::vector<BenchItem> warm(items->begin(),
                              items->begin() + std::min<size_t>(ro.warmup, items->size()));
  std::vector<BenchItem> measured(items->begin() + warm.size(), items->end());
  for (size_t i = 0; i < measured.size(); ++i)
    measured[i].request.id = "bench-" + std::to_string(i);
  if (!warm.empty()) {
    RunOptions w = ro;
    w.request_rate = -1;
    w.concurrency = 1;
    w.progress = false;
    Run(warm, w);
  }

  // One run per swept rate or client count (a single run without a sweep).
  std::vector<std::pair<double, int>> runs;
  for (double rate : ParseRates(sweep)) runs.push_back({rate, 0});
  for (double c : ParseRates(sweep_concurrency)) runs.push_back({-1, static_cast<int>(c)});
  if (runs.empty()) runs.push_back({ro.request_rate, ro.concurrency});
  std::vector<Report> reports;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& [rate, clients_n] : runs) {
    RunOptions r = ro;
    r.request_rate = rate;
    r.concurrency = clients_n;
    Report rep = Summarize(Run(measured, r), short_input_max);
    rep.offered_rate = rate > 0 ? rate : 0;
    rep.concurrency = rate > 0 ? 0 : clients_n;
    if (!json_only) {
      if (runs.size() > 1 && rate > 0) std::printf("request rate %.2f/s\n", rate);
      if (runs.size() > 1 && rate <= 0) std::printf("concurrency %d\n", clients_n);
      std::printf("%s", rep.Table().c_str());
    }
    all.push_back(rep.ToJson());
    reports.push_back(rep);
  }
  const nlohmann::json out = runs.size() == 1 ? all[0] : all;
  if (json_only) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (!json_path.empty()) {
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  if (!svg_path.empty()) std::ofstream(svg_path) << SweepSvg(reports);
  int64_t failed = 0;
  std::string first;
  for (const auto& rep : reports) {
    failed += rep.total - rep.succeeded;
    if (first.empty()) first = rep.first_error;
  }
  if (failed > 0) {
    std::string kinds;
    for (const auto& rep : reports) {
      for (const auto& [k, n] : rep.errors) kinds += " " + k + " x" + std::to_string(n);
    }
    std::fprintf(stderr, "inflight-bench: %lld requests failed (%s); first error: %s\n",
                 static_cast<long long>(failed), kinds.c_str() + 1, first.c_str());
    return 1;
  }
  return 0;
}
