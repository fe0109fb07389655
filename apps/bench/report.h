// inflight-bench results: the reference benchmark_core_model table plus time to first token
// and inter-token latency, errors by kind, JSON, and an SVG of throughput against latency.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace inflight::bench {

struct RequestRecord {
  bool ok = false;
  std::string error_kind, error;
  double start_s = 0, end_s = 0;  // since the benchmark started
  double ttft_ms = -1;
  std::vector<double> itl_ms;  // per later event: gap / tokens in it
  int64_t input_tokens = 0, output_tokens = 0;
};

struct Percentiles {
  double avg = 0, p50 = 0, p90 = 0, p99 = 0;
};

struct Report {
  int64_t total = 0, succeeded = 0;
  std::map<std::string, int64_t> errors;  // by kind
  std::string first_error;
  double span_s = 0;  // first start -> last end
  double requests_per_s = 0, output_tokens_per_s = 0;
  Percentiles latency_ms, ttft_ms, itl_ms;
  Percentiles short_ttft_ms;  // requests with input_tokens <= short_input_max (if set)
  int64_t short_input_max = 0;
  double avg_input_tokens = 0, avg_output_tokens = 0;
  int64_t total_output_tokens = 0;
  double offered_rate = 0;  // requests/s asked for (0: closed loop or all at once)
  int concurrency = 0;      // closed-loop clients (0: open loop)

  nlohmann::json ToJson() const;
  std::string Table() const;
};

// Percentile as benchmark_core_model computes it: sorted, index ceil(n*p) - 1.
double Percentile(std::vector<double> v, double p);
Report Summarize(const std::vector<RequestRecord>& records, int64_t short_input_max = 0);
// Throughput (x) against p99 latency and p99 time to first token (y), one point per rate.
std::string SweepSvg(const std::vector<Report>& reports);

}  // namespace inflight::bench
