#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace inflight::bench {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      static_cast<size_t>(std::max(0.0, std::ceil(static_cast<double>(v.size()) * p) - 1));
  return v[std::min(i, v.size() - 1)];
}

namespace {

Percentiles Stats(const std::vector<double>& v) {
  Percentiles p;
  if (v.empty()) return p;
  p.avg = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  p.p50 = Percentile(v, 0.5);
  p.p90 = Percentile(v, 0.9);
  p.p99 = Percentile(v, 0.99);
  return p;
}

nlohmann::json PJson(const Percentiles& p) {
  return {{"avg", p.avg}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

}  // namespace

Report Summarize(const std::vector<RequestRecord>& records, int64_t short_input_max) {
  Report r;
  r.short_input_max = short_input_max;
  std::vector<double> short_ttft;
  r.total = static_cast<int64_t>(records.size());
  std::vector<double> latency, ttft, itl, in, out;
  double first = 1e300, last = 0;
  for (const auto& rec : records) {
    if (!rec.ok) {
      ++r.errors[rec.error_kind.empty() ? "unknown" : rec.error_kind];
      if (r.first_error.empty()) r.first_error = rec.error;
      continue;
    }
    ++r.succeeded;
    first = std::min(first, rec.start_s);
    last = std::max(last, rec.end_s);
    latency.push_back((rec.end_s - rec.start_s) * 1000);
    if (rec.ttft_ms >= 0) ttft.push_back(rec.ttft_ms);
    if (rec.ttft_ms >= 0 && rec.input_tokens <= short_input_max) short_ttft.push_back(rec.ttft_ms);
    itl.insert(itl.end(), rec.itl_ms.begin(), rec.itl_ms.end());
    in.push_back(static_cast<double>(rec.input_tokens));
    out.push_back(static_cast<double>(rec.output_tokens));
    r.total_output_tokens += rec.output_tokens;
  }
  if (r.succeeded == 0) return r;
  r.span_s = std::max(1e-9, last - first);
  r.requests_per_s = static_cast<double>(r.succeeded) / r.span_s;
  r.output_tokens_per_s = static_cast<double>(r.total_output_tokens) / r.span_s;
  r.latency_ms = Stats(latency);
  r.ttft_ms = Stats(ttft);
  r.short_ttft_ms = Stats(short_ttft);
  r.itl_ms = Stats(itl);
  r.avg_input_tokens = Stats(in).avg;
  r.avg_output_tokens = Stats(out).avg;
  return r;
}

nlohmann::json Report::ToJson() const {
  nlohmann::json j = {{"total_requests", total},
                      {"succeeded", succeeded},
                      {"errors", errors},
                      {"requests_per_sec", requests_per_s},
                      {"output_tokens_per_sec", output_tokens_per_s},
                      {"latency_ms", PJson(latency_ms)},
                      {"time_to_first_token_ms", PJson(ttft_ms)},
                      {"inter_token_latency_ms", PJson(itl_ms)},
                      {"avg_input_tokens", avg_input_tokens},
                      {"avg_output_tokens", avg_output_tokens},
                      {"total_output_tokens", total_output_tokens},
                      {"total_latency_ms", span_s * 1000}};
  if (offered_rate > 0) j["request_rate"] = offered_rate;
  if (concurrency > 0) j["concurrency"] = concurrency;
  if (short_input_max > 0) {
    j["short_request_time_to_first_token_ms"] = PJson(short_ttft_ms);
    j["short_input_max"] = short_input_max;
  }
  if (!first_error.empty()) j["first_error"] = first_error;
  return j;
}

std::string Report::Table() const {
  std::ostringstream o;
  char line[160];
  auto row = [&](const char* name, double v) {
    std::snprintf(line, sizeof line, "| %-32s | %14.2f |\n", name, v);
    o << line;
  };
  o << "+----------------------------------+----------------+\n";
  row("Requests/Sec", requests_per_s);
  row("OP tokens/sec", output_tokens_per_s);
  row("Avg. latency (ms)", latency_ms.avg);
  row("P50 latency (ms)", latency_ms.p50);
  row("P90 latency (ms)", latency_ms.p90);
  row("P99 latency (ms)", latency_ms.p99);
  row("Avg. time to first token (ms)", ttft_ms.avg);
  row("P50 time to first token (ms)", ttft_ms.p50);
  row("P90 time to first token (ms)", ttft_ms.p90);
  row("P99 time to first token (ms)", ttft_ms.p99);
  row("Avg. inter-token latency (ms)", itl_ms.avg);
  row("P50 inter-token latency (ms)", itl_ms.p50);
  row("P90 inter-token latency (ms)", itl_ms.p90);
  row("P99 inter-token latency (ms)", itl_ms.p99);
  row("Avg. IP tokens per request", avg_input_tokens);
  row("Avg. OP tokens per request", avg_output_tokens);
  row("Total latency (ms)", span_s * 1000);
  if (short_input_max > 0) {
    char name[64];
    std::snprintf(name, sizeof name, "P99 TTFT, prompt <= %lld tok (ms)",
                  static_cast<long long>(short_input_max));
    row(name, short_ttft_ms.p99);
  }
  row("Total requests", static_cast<double>(total));
  row("Failed requests", static_cast<double>(total - succeeded));
  o << "+----------------------------------+----------------+\n";
  for (const auto& [kind, n] : errors) o << "errors: " << kind << " x" << n << "\n";
  return o.str();
}

std::string SweepSvg(const std::vector<Report>& reports) {
  const double w = 640, h = 420, left = 70, right = 20, top = 30, bottom = 50;
  double max_x = 1, max_y = 1;
  for (const auto& r : reports) {
    max_x = std::max(max_x, r.output_tokens_per_s);
    max_y = std::max({max_y, r.latency_ms.p99, r.ttft_ms.p99});
  }
  max_x *= 1.1;
  max_y *= 1.1;
  auto X = [&](double x) { return left + x / max_x * (w - left - right); };
  auto Y = [&](double y) { return h - bottom - y / max_y * (h - top - bottom); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << w / 2
    << "\" y=\"18\" text-anchor=\"middle\">inflight-bench: throughput vs p99 latency</text>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\""
    << h - bottom << "\" stroke=\"black\"/>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
    << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double xv = max_x * i / 4, yv = max_y * i / 4;
    s << "<text x=\"" << X(xv) << "\" y=\"" << h - bottom + 16 << "\" text-anchor=\"middle\">"
      << static_cast<int>(xv) << "</text>\n";
    s << "<text x=\"" << left - 6 << "\" y=\"" << Y(yv) + 4 << "\" text-anchor=\"end\">"
      << static_cast<int>(yv) << "</text>\n";
  }
  s << "<text x=\"" << w / 2 << "\" y=\"" << h - 12
    << "\" text-anchor=\"middle\">output tokens/s</text>\n";
  s << "<text transform=\"translate(16," << h / 2
    << ") rotate(-90)\" text-anchor=\"middle\">ms</text>\n";
  auto series = [&](const char* color, const char* name, auto get, int legend_row) {
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const auto& r : reports) s << X(r.output_tokens_per_s) << "," << Y(get(r)) << " ";
    s << "\"/>\n";
    for (const auto& r : reports) {
      s << "<circle cx=\"" << X(r.output_tokens_per_s) << "\" cy=\"" << Y(get(r))
        << "\" r=\"3\" fill=\"" << color << "\"/>\n";
      if (legend_row == 0) {
        s << "<text x=\"" << X(r.output_tokens_per_s) + 5 << "\" y=\"" << Y(get(r)) - 5 << "\">";
        if (r.offered_rate > 0) {
          s << r.offered_rate << " req/s";
        } else {
          s << r.concurrency << " clients";
        }
        s << "</text>\n";
      }
    }
    s << "<text x=\"" << left + 10 << "\" y=\"" << top + 14 + 16 * legend_row << "\" fill=\""
      << color << "\">" << name << "</text>\n";
  };
  series(
      "#d62728", "p99 request latency", [](const Report& r) { return r.latency_ms.p99; }, 0);
  series(
      "#1f77b4", "p99 time to first token", [](const Report& r) { return r.ttft_ms.p99; }, 1);
  s << "</svg>\n";
  return s.str();
}

}  // namespace inflight::bench
