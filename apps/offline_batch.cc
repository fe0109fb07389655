#include "offline_batch.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/executor.h"
#include "engine/output_stream.h"

namespace inflight {
namespace {

using nlohmann::json;

struct Line {
  Request request;
  double arrival_ms = 0;
};

// Parses one JSON line into a request; errors name the line.
StatusOr<Line> ParseLine(const std::string& text, int line_no, const Tokenizer* tok,
                         const OfflineOptions& o) {
  auto fail = [&](const std::string& m) {
    return InvalidArgumentError("line " + std::to_string(line_no) + ": " + m);
  };
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
  Line l;
  Request& r = l.request;
  try {
    if (j.contains("prompt_ids")) {
      r.prompt_ids = j["prompt_ids"].get<std::vector<int32_t>>();
    } else if (j.contains("prompt")) {
      if (!tok) return fail("the model has no tokenizer: give prompt_ids");
      r.prompt_ids = tok->Encode(j["prompt"].get<std::string>(), o.add_special);
    } else {
      return fail("needs \"prompt\" or \"prompt_ids\"");
    }
    r.max_tokens = j.value("max_tokens", o.default_max_tokens);
    r.sampling = o.default_sampling;
    r.sampling.temperature = j.value("temperature", r.sampling.temperature);
    r.sampling.top_k = j.value("top_k", r.sampling.top_k);
    r.sampling.top_p = j.value("top_p", r.sampling.top_p);
    r.sampling.min_p = j.value("min_p", r.sampling.min_p);
    r.sampling.seed = j.value("seed", r.sampling.seed);
    r.sampling.repetition_penalty = j.value("repetition_penalty", r.sampling.repetition_penalty);
    r.sampling.presence_penalty = j.value("presence_penalty", r.sampling.presence_penalty);
    r.sampling.frequency_penalty = j.value("frequency_penalty", r.sampling.frequency_penalty);
    r.min_tokens = j.value("min_tokens", 0);
    r.priority = j.value("priority", 0.5f);
    r.num_return_sequences = j.value("num_return_sequences", 1);
    r.return_log_probs = j.value("return_log_probs", false);
    l.arrival_ms = j.value("arrival_ms", 0.0);
    if (j.contains("stop_ids"))
      r.stop_words = j["stop_ids"].get<std::vector<std::vector<int32_t>>>();
    if (j.contains("stop") && tok) {
      for (const auto& s : j["stop"])
        r.stop_words.push_back(tok->Encode(s.get<std::string>(), false));
    }
    r.end_id = j.value("end_id", (!o.ignore_eos && tok) ? tok->eos_id() : -1);
    // Other end-of-turn tokens (Llama 3's <|eot_id|>, ...) end generation as stop words.
    if (!o.ignore_eos && tok && !j.contains("end_id")) {
      for (int32_t id : tok->spec().extra_eos_ids) r.stop_words.push_back({id});
    }
  } catch (const json::exception& e) {
    return fail(std::string("bad field: ") + e.what());
  }
  if (l.arrival_ms < 0) return fail("arrival_ms must be >= 0");
  r.exclude_input_in_output = true;
  return l;
}

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Mean and exact percentiles of per-request values.
json Summary(std::vector<double> v) {
  if (v.empty()) return json::object();
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i > 0 ? i - 1 : 0)];
  };
  double sum = 0;
  for (double x : v) sum += x;
  return {{"mean", sum / static_cast<double>(v.size())},
          {"p50", at(0.5)},
          {"p90", at(0.9)},
          {"p99", at(0.99)},
          {"max", v.back()}};
}

}  // namespace

int RunOfflineBatch(const Model& model, const OfflineOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "inflight-generate: %s\n", s.message().c_str());
    return 1;
  };
  std::ifstream in(o.prompts_file);
  if (!in) return fail(NotFoundError("cannot open --prompts-file '" + o.prompts_file + "'"));
  const Tokenizer* tok = model.tokenizer();
  std::vector<Line> lines;
  std::string text;
  for (int no = 1; std::getline(in, text); ++no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto l = ParseLine(text, no, tok, o);
    if (!l.ok()) return fail(l.status());
    lines.push_back(std::move(l).value());
  }
  if (lines.empty()) return fail(InvalidArgumentError("--prompts-file has no requests"));
  auto executor = Executor::Create(model, o.executor);
  if (!executor.ok()) return fail(executor.status());
  Executor& e = **executor;

  struct Outcome {
    RequestId id = 0;
    Status enqueue_status;
    std::vector<Result> finals;  // one per sequence
    Clock::time_point end_time;
  };
  std::vector<Outcome> outcomes(lines.size());
  // Each request's results arrive through its own output stream; one collector thread reads
  // them (the engine thread only pushes and wakes it).
  std::vector<std::shared_ptr<OutputStream>> streams(lines.size());
  std::vector<bool> finished(lines.size(), false);
  std::mutex mu;
  std::condition_variable cv;
  size_t num_done = 0;
  bool woken = false;
  std::thread collector([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (num_done < lines.size()) {
      cv.wait(lock, [&] { return woken || num_done == lines.size(); });
      woken = false;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!streams[i] || finished[i]) continue;
        for (Result& res : streams[i]->Take()) {
          const bool is_final = res.is_final;
          if (res.is_sequence_final || res.is_final) outcomes[i].finals.push_back(std::move(res));
          if (is_final) {
            outcomes[i].end_time = Clock::now();
            finished[i] = true;
            ++num_done;
          }
        }
      }
      cv.notify_all();
    }
  });
  const Clock::time_point start = Clock::now();
  std::vector<size_t> order(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lines[a].arrival_ms < lines[b].arrival_ms; });
  for (size_t i : order) {
    std::this_thread::sleep_until(
        start + std::chrono::microseconds(static_cast<int64_t>(lines[i].arrival_ms * 1000)));
    Request r = lines[i].request;
    r.arrival_time = Clock::now();
    r.output = std::make_shared<OutputStream>();
    {
      std::lock_guard<std::mutex> lock(mu);
      streams[i] = r.output;
    }
    r.output->SetNotify([&] {
      std::lock_guard<std::mutex> lock(mu);
      woken = true;
      cv.notify_all();
    });
    auto id = e.Enqueue(std::move(r));
    std::lock_guard<std::mutex> lock(mu);
    if (id.ok()) {
      outcomes[i].id = *id;
    } else {
      outcomes[i].enqueue_status = id.status();
      outcomes[i].end_time = Clock::now();
      finished[i] = true;
      ++num_done;
      cv.notify_all();
    }
  }
  // Drain the step statistics while waiting (the executor keeps only the newest 1000).
  int32_t peak = 0;
  int64_t pauses = 0, num_steps = 0;
  std::ofstream steps_out;
  if (!o.steps_file.empty()) {
    steps_out.open(o.steps_file);
    if (!steps_out)
      std::fprintf(stderr, "inflight-generate: cannot write %s\n", o.steps_file.c_str());
  }
  auto drain = [&] {
    for (const IterationStats& s : e.GetLatestIterationStats()) {
      if (steps_out) steps_out << s.ToJson() << "\n";
      peak = std::max(peak, s.num_scheduled_context + s.num_scheduled_generation);
      pauses = std::max(pauses, s.num_paused_total);
      num_steps = s.iteration;
    }
  };
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(20),
                      [&] { return num_done == lines.size(); }))
        break;
    }
    drain();
  }
  const double seconds = MsBetween(start, Clock::now()) / 1000;
  collector.join();
  drain();
  e.Shutdown();

  int64_t output_tokens = 0, prompt_tokens = 0;
  int failures = 0;
  // Latency over the requests that finished (ms): end to end, to the first token, in the queue;
  // and every token's inter-token latency.
  std::vector<double> latencies, ttfts, queues;
  LatencyHistogram itl;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Outcome& oc = outcomes[i];
    json j;
    j["index"] = i;
    j["prompt_ids"] = lines[i].request.prompt_ids;
    prompt_tokens += static_cast<int64_t>(lines[i].request.prompt_ids.size());
    if (!oc.enqueue_status.ok() || (!oc.finals.empty() && !oc.finals.back().error.ok())) {
      j["error"] =
          !oc.enqueue_status.ok() ? oc.enqueue_status.message() : oc.finals.back().error.message();
      ++failures;
      std::cout << j.dump() << "\n";
      continue;
    }
    j["request_id"] = oc.id;
    json seqs = json::array();
    for (const Result& r : oc.finals) {
      json s = {{"sequence_index", r.sequence_index},
                {"generated_ids", r.output_token_ids},
                {"finish_reason", FinishReasonName(r.finish_reason)}};
      if (tok && o.print_text) s["text"] = tok->Decode(r.output_token_ids);
      if (!r.log_probs.empty()) s["log_probs"] = r.log_probs;
      output_tokens += static_cast<int64_t>(r.output_token_ids.size());
      seqs.push_back(s);
    }
    // The common single-sequence case reads flat.
    if (seqs.size() == 1) {
      for (auto it = seqs[0].begin(); it != seqs[0].end(); ++it) j[it.key()] = it.value();
      j.erase("sequence_index");
    } else {
      j["sequences"] = seqs;
    }
    const RequestStats& st = oc.finals.back().stats;
    j["queue_ms"] = st.queue_ms();
    j["ttft_ms"] = st.time_to_first_token_ms();
    j["arrival_ms"] = MsBetween(start, st.arrival_time);
    j["end_ms"] = MsBetween(start, oc.end_time);
    const LatencyHistogram& h = st.inter_token_latency;
    if (h.count() > 0) {
      j["itl_ms"] = {{"mean", h.mean_ms()},
                     {"p50", h.Percentile(0.5)},
                     {"p99", h.Percentile(0.99)},
                     {"max", h.max_ms()}};
    }
    itl.Merge(h);
    latencies.push_back(MsBetween(st.arrival_time, oc.end_time));
    if (st.first_token_time != Clock::time_point{}) ttfts.push_back(st.time_to_first_token_ms());
    if (st.first_scheduled_time != Clock::time_point{}) queues.push_back(st.queue_ms());
    j["reused_blocks"] = st.num_reused_blocks;
    j["pauses"] = st.num_pauses;
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  const ExecutorConfig& c = o.executor;
  json summary = {{"requests", lines.size()},
                  {"failed", failures},
                  {"prompt_tokens", prompt_tokens},
                  {"output_tokens", output_tokens},
                  {"seconds", seconds},
                  {"output_tokens_per_second", seconds > 0 ? output_tokens / seconds : 0},
                  {"steps", num_steps},
                  {"peak_batch_size", peak},
                  {"pauses", pauses},
                  {"batching", BatchingStrategyName(c.batching)},
                  {"policy", CapacityPolicyName(c.policy)},
                  {"max_batch_size", c.max_batch_size},
                  {"max_num_tokens", c.max_num_tokens},
                  {"kv_cache_blocks", e.num_kv_blocks()},
                  {"tokens_per_block", c.tokens_per_block},
                  {"chunked_context", c.enable_chunked_context},
                  {"kv_reuse", c.enable_kv_cache_reuse},
                  {"max_inter_token_latency_ms", c.max_inter_token_latency_ms},
                  {"latency_ms", Summary(latencies)},
                  {"ttft_ms", Summary(ttfts)},
                  {"queue_ms", Summary(queues)},
                  {"itl_ms",
                   {{"mean", itl.mean_ms()},
                    {"p50", itl.Percentile(0.5)},
                    {"p90", itl.Percentile(0.9)},
                    {"p99", itl.Percentile(0.99)},
                    {"max", itl.max_ms()},
                    {"tokens", itl.count()}}}};
  std::cout << json{{"summary", summary}}.dump() << std::endl;
  return failures == 0 ? 0 : 2;
}

}  // namespace inflight
