#include "serving/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

namespace inflight::serving {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

struct Metrics::Families {
  Family<Counter>* engine_steps;
  Family<Counter>* draft_tokens;
  Family<Counter>* accepted_draft_tokens;
  Family<Counter>* engine_step_s;
  Family<Counter>* engine_forward_s;
  Family<Counter>* success;
  Family<Counter>* failure;
  Family<Counter>* count;
  Family<Counter>* exec_count;
  Family<Gauge>* pending;
  Family<Counter>* request_us;
  Family<Counter>* queue_us;
  Family<Counter>* input_us;
  Family<Counter>* infer_us;
  Family<Counter>* output_us;
  Family<Histogram>* first_response_ms;
  Family<Gauge>* load_secs;
  Family<Gauge>* cpu_util;
  Family<Gauge>* cpu_mem_total;
  Family<Gauge>* cpu_mem_used;
  Family<Gauge>* trt_request;
  Family<Gauge>* trt_memory;
  Family<Gauge>* trt_kv;
  Family<Gauge>* kv_disk;
  Family<Gauge>* kv_handoff;
  Family<Counter>* kv_reused_tier;
  Family<Gauge>* trt_ifb;
  Family<Gauge>* trt_v1;
  Family<Gauge>* trt_general;
  Family<Counter>* trt_disaggregated;
  Family<Histogram>* input_len;
  Family<Histogram>* output_len;
  Family<Histogram>* ttft;
  Family<Histogram>* itl;
  Family<Histogram>* e2e;
  Family<Histogram>* queue;
};

namespace {

template <typename Builder>
auto& Build(Builder b, const char* name, const char* help, prometheus::Registry& reg) {
  return b.Name(name).Help(help).Register(reg);
}

Labels ModelLabels(const std::string& model, const std::string& version) {
  return {{"model", model}, {"version", version}};
}

Labels With(Labels l, const std::string& key, const std::string& value) {
  l[key] = value;
  return l;
}

const Histogram::BucketBoundaries kTokenBuckets = {10, 50, 100, 500, 1000};
const Histogram::BucketBoundaries kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   30,  60};

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()), f_(std::make_unique<Families>()) {
  auto& r = *registry_;
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  f_->success = &Build(BuildCounter(), "nv_inference_request_success",
                       "Number of successful inference requests, all batch sizes", r);
  f_->failure = &Build(BuildCounter(), "nv_inference_request_failure",
                       "Number of failed inference requests, all batch sizes", r);
  f_->count = &Build(BuildCounter(), "nv_inference_count",
                     "Number of inferences performed (does not include cached requests)", r);
  f_->exec_count =
      &Build(BuildCounter(), "nv_inference_exec_count",
             "Number of model executions performed (does not include cached requests)", r);
  f_->pending = &Build(BuildGauge(), "nv_inference_pending_request_count",
                       "Instantaneous number of pending requests awaiting execution per-model.", r);
  f_->request_us =
      &Build(BuildCounter(), "nv_inference_request_duration_us",
             "Cumulative inference request duration in microseconds (includes cached requests)", r);
  f_->queue_us =
      &Build(BuildCounter(), "nv_inference_queue_duration_us",
             "Cumulative inference queuing duration in microseconds (includes cached requests)", r);
  f_->input_us = &Build(
      BuildCounter(), "nv_inference_compute_input_duration_us",
      "Cumulative compute input duration in microseconds (does not include cached requests)", r);
  f_->infer_us = &Build(
      BuildCounter(), "nv_inference_compute_infer_duration_us",
      "Cumulative compute inference duration in microseconds (does not include cached requests)",
      r);
  f_->output_us = &Build(BuildCounter(), "nv_inference_compute_output_duration_us",
                         "Cumulative inference compute output duration in microseconds (does not "
                         "include cached requests)",
                         r);
  f_->first_response_ms = &Build(BuildHistogram(), "nv_inference_first_response_histogram_ms",
                                 "Duration from request to first response in milliseconds", r);
  f_->load_secs =
      &Build(BuildGauge(), "nv_model_load_duration_secs", "Model load time in seconds", r);
  f_->cpu_util = &Build(BuildGauge(), "nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", r);
  f_->cpu_mem_total =
      &Build(BuildGauge(), "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", r);
  f_->cpu_mem_used =
      &Build(BuildGauge(), "nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", r);
  f_->trt_request =
      &Build(BuildGauge(), "nv_trt_llm_request_metrics", "TRT LLM request metrics", r);
  f_->trt_memory = &Build(BuildGauge(), "nv_trt_llm_runtime_memory_metrics",
                          "TRT LLM runtime memory metrics", r);
  f_->trt_kv = &Build(BuildGauge(), "nv_trt_llm_kv_cache_block_metrics",
                      "TRT LLM KV cache block metrics", r);
  f_->kv_disk = &Build(BuildGauge(), "inflight_kv_cache_disk_tier",
                       "The KV cache's disk tier: files and bytes kept, blocks read back (hits), "
                       "written, dropped (write queue full), rejected (damaged or foreign files) "
                       "and evicted (size bound)",
                       r);
  f_->kv_handoff = &Build(BuildGauge(), "inflight_kv_handoff_segments",
                          "Disaggregated serving's shared-memory K/V hand-offs: segments written "
                          "(context phases), taken (generation phases), expired (nobody took "
                          "them), declined (folder full: sent inline), and the bytes live",
                          r);
  f_->kv_reused_tier = &Build(BuildCounter(), "inflight_kv_cache_reused_blocks_total",
                              "Prompt blocks served from the KV cache instead of computed, by "
                              "tier: pool (in memory) or disk",
                              r);
  f_->trt_ifb = &Build(BuildGauge(), "nv_trt_llm_inflight_batcher_metrics",
                       "TRT LLM inflight_batcher-specific metrics", r);
  f_->trt_v1 = &Build(BuildGauge(), "nv_trt_llm_v1_metrics", "TRT LLM v1-specific metrics", r);
  f_->trt_general =
      &Build(BuildGauge(), "nv_trt_llm_general_metrics", "General TRT LLM metrics", r);
  f_->trt_disaggregated = &Build(BuildCounter(), "nv_trt_llm_disaggregated_serving_metrics",
                                 "TRT LLM disaggregated serving metrics", r);
  f_->input_len = &Build(BuildHistogram(), "nv_llm_input_token_len", "TRT LLM response metrics", r);
  f_->output_len =
      &Build(BuildHistogram(), "nv_llm_output_token_len", "TRT LLM response metrics", r);
  f_->ttft = &Build(BuildHistogram(), "inflight_time_to_first_token_seconds",
                    "Time from arrival to the first generated token", r);
  f_->itl = &Build(
      BuildHistogram(), "inflight_inter_token_latency_seconds",
      "Time between a request's generated tokens, one observation per token after its first", r);
  f_->e2e = &Build(BuildHistogram(), "inflight_request_latency_seconds",
                   "Time from arrival to the last generated token", r);
  f_->queue = &Build(BuildHistogram(), "inflight_queue_time_seconds",
                     "Time from arrival to the first scheduled step", r);
  f_->engine_steps =
      &Build(BuildCounter(), "inflight_engine_steps_total", "Engine steps that ran the model", r);
  f_->draft_tokens = &Build(BuildCounter(), "inflight_speculative_draft_tokens_total",
                            "Draft tokens verified by speculative decoding (finished requests)", r);
  f_->accepted_draft_tokens =
      &Build(BuildCounter(), "inflight_speculative_accepted_draft_tokens_total",
             "Draft tokens accepted by speculative decoding (finished requests)", r);
  f_->engine_step_s = &Build(
      BuildCounter(), "inflight_engine_step_seconds_total",
      "Engine thread time in steps (scheduling, forward pass, sampling, handing results out)", r);
  f_->engine_forward_s =
      &Build(BuildCounter(), "inflight_engine_forward_seconds_total",
             "Of inflight_engine_step_seconds_total, the time inside the model's forward pass", r);
}

void Metrics::RecordEngineSteps(const std::string& model, const std::string& version,
                                const std::vector<EngineStep>& steps) {
  double step_ms = 0, forward_ms = 0, n = 0;
  for (const EngineStep& s : steps) {
    if (s.forward_ms <= 0) continue;  // idle loop turns
    step_ms += s.step_ms;
    forward_ms += s.forward_ms;
    ++n;
  }
  const Labels l = ModelLabels(model, version);
  double from_pool = 0, from_disk = 0;
  for (const EngineStep& s : steps) {
    from_pool += s.kv_blocks_reused - s.kv_blocks_reused_from_disk;
    from_disk += s.kv_blocks_reused_from_disk;
  }
  f_->kv_reused_tier->Add(With(l, "tier", "pool")).Increment(from_pool);
  f_->kv_reused_tier->Add(With(l, "tier", "disk")).Increment(from_disk);
  f_->engine_steps->Add(l).Increment(n);
  f_->engine_step_s->Add(l).Increment(step_ms / 1e3);
  f_->engine_forward_s->Add(l).Increment(forward_ms / 1e3);
}

Metrics::~Metrics() = default;

void Metrics::RecordInference(const std::string& model, const std::string& version,
                              const InferenceRecord& rec) {
  const Labels l = ModelLabels(model, version);
  if (rec.success) {
    f_->success->Add(l).Increment();
    f_->count->Add(l).Increment();
    f_->exec_count->Add(l).Increment();
  } else {
    f_->failure->Add(With(l, "reason", rec.failure_reason.empty() ? "OTHER" : rec.failure_reason))
        .Increment();
  }
  f_->request_us->Add(l).Increment(static_cast<double>(rec.request_us));
  f_->queue_us->Add(l).Increment(static_cast<double>(rec.queue_us));
  f_->input_us->Add(l).Increment(static_cast<double>(rec.compute_input_us));
  f_->infer_us->Add(l).Increment(static_cast<double>(rec.compute_infer_us));
  f_->output_us->Add(l).Increment(static_cast<double>(rec.compute_output_us));
  if (rec.first_response_ms >= 0) {
    f_->first_response_ms->Add(l, Histogram::BucketBoundaries{100, 500, 2000, 5000})
        .Observe(rec.first_response_ms);
  }
}

void Metrics::AddPending(const std::string& model, const std::string& version, int64_t delta) {
  f_->pending->Add(ModelLabels(model, version)).Increment(static_cast<double>(delta));
}

void Metrics::SetModelLoadDuration(const std::string& model, const std::string& version,
                                   double seconds) {
  f_->load_secs->Add(ModelLabels(model, version)).Set(seconds);
}

void Metrics::SetLlmGauges(const std::string& model, const std::string& version,
                           const LlmGaugeInput& in) {
  // Under the lock Serialize holds while it collects: a scrape sees the whole update or none
  // of it, never used from this one beside free from the last (used + free = max holds).
  std::lock_guard<std::mutex> lock(mu_);
  const Labels l = ModelLabels(model, version);
  const EngineStep& s = in.last;
  const int32_t scheduled = s.num_scheduled_context + s.num_scheduled_generation;
  auto req = [&](const char* type, double v) {
    f_->trt_request->Add(With(l, "request_type", type)).Set(v);
  };
  req("active", s.num_active);
  req("max", in.max_active);
  req("scheduled", scheduled);
  req("context", s.num_scheduled_context);
  req("waiting", std::max(0, s.num_active + s.num_queued - scheduled));
  auto kv = [&](const char* type, double v) {
    f_->trt_kv->Add(With(l, "kv_cache_block_type", type)).Set(v);
  };
  kv("max", in.blocks.total);
  kv("free", in.blocks.free + in.blocks.cached);
  kv("used", in.blocks.used);
  kv("tokens_per", in.tokens_per_block);
  kv("reused", s.kv_blocks_reused);
  if (in.disk.on) {
    auto disk = [&](const char* what, int64_t v) {
      f_->kv_disk->Add(With(l, "value", what)).Set(static_cast<double>(v));
    };
    disk("files", in.disk.files);
    disk("bytes", in.disk.bytes);
    disk("hits", in.disk.hits);
    disk("written", in.disk.written);
    disk("dropped", in.disk.dropped);
    disk("rejected", in.disk.rejected);
    disk("evicted", in.disk.evicted);
  }
  if (in.handoff.on) {
    auto seg = [&](const char* what, int64_t v) {
      f_->kv_handoff->Add(With(l, "value", what)).Set(static_cast<double>(v));
    };
    seg("written", in.handoff.written);
    seg("taken", in.handoff.taken);
    seg("expired", in.handoff.expired);
    seg("declined", in.handoff.declined);
    seg("live_bytes", in.handoff.live_bytes);
  }
  kv("fraction", in.blocks.total > 0 ? static_cast<double>(in.blocks.used) / in.blocks.total : 0.0);
  // The series above keep TensorRT-LLM's names and count the full group only. A model with
  // sliding-window layers keeps their K/V in a second pool of blocks, of another size, that
  // runs out on its own: its figures come as window_* series beside them (never summed into
  // them), and only for such a model, so a dashboard can tell "no window group" from "empty".
  const KvBlocks& w = in.window_blocks;
  if (w.total > 0) {
    kv("window_max", w.total);
    kv("window_free", w.free + w.cached);
    kv("window_used", w.used);
    kv("window_fraction", static_cast<double>(w.used) / w.total);
    kv("window_tokens", in.kv_window);
  }
  long pages = 0, resident = 0;
  if (std::ifstream statm("/proc/self/statm"); statm >> pages >> resident) {
    f_->trt_memory->Add(With(l, "memory_type", "cpu"))
        .Set(static_cast<double>(resident) * sysconf(_SC_PAGESIZE));
  }
  f_->trt_memory->Add(With(l, "memory_type", "gpu")).Set(0);
  f_->trt_memory->Add(With(l, "memory_type", "pinned")).Set(0);
  if (!in.has_iteration) return;
  if (in.static_batching) {
    auto v1 = [&](const char* type, double v) {
      f_->trt_v1->Add(With(l, "v1_specific_metric", type)).Set(v);
    };
    v1("total_context_tokens", s.num_context_tokens);
    v1("total_generation_tokens", s.num_generation_tokens);
    v1("empty_generation_slots", std::max(0, in.max_active - scheduled));
  } else {
    auto ifb = [&](const char* type, double v) {
      f_->trt_ifb->Add(With(l, "inflight_batcher_specific_metric", type)).Set(v);
    };
    ifb("total_context_tokens", s.num_context_tokens);
    ifb("generation_requests", s.num_scheduled_generation);
    ifb("micro_batch_id", 0);
    ifb("paused_requests", s.num_paused);
  }
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  f_->trt_general->Add(With(l, "general_type", "timestamp")).Set(static_cast<double>(now_us));
  f_->trt_general->Add(With(l, "general_type", "iteration_counter"))
      .Set(static_cast<double>(s.iteration));
}

void Metrics::ObserveLlmRequest(const std::string& model, const std::string& version,
                                const LlmRequestRecord& st) {
  const Labels l = ModelLabels(model, version);
  f_->input_len->Add(With(l, "response_metric_type", "total_input_tokens"), kTokenBuckets)
      .Observe(st.num_prompt_tokens);
  f_->output_len->Add(With(l, "response_metric_type", "total_output_tokens"), kTokenBuckets)
      .Observe(st.num_generated_tokens);
  if (st.queue_ms >= 0) f_->queue->Add(l, kLatencyBuckets).Observe(st.queue_ms / 1000);
  if (st.kv_transfer) {
    f_->trt_disaggregated->Add(With(l, "disaggregated_serving_type", "kv_cache_transfer_ms"))
        .Increment(st.kv_transfer_ms);
    f_->trt_disaggregated->Add(With(l, "disaggregated_serving_type", "request_count")).Increment();
  }
  // Created at a model's first finished request, so both show (at 0) for every LLM model.
  // Per speculative decoding mode: acceptance is what tells the modes apart.
  const Labels ml = With(l, "mode", st.speculative_mode);
  f_->draft_tokens->Add(ml).Increment(st.num_draft_tokens);
  f_->accepted_draft_tokens->Add(ml).Increment(st.num_accepted_draft_tokens);
  if (st.time_to_first_token_ms >= 0) {
    f_->ttft->Add(l, kLatencyBuckets).Observe(st.time_to_first_token_ms / 1000);
    f_->e2e->Add(l, kLatencyBuckets).Observe(st.end_to_end_ms / 1000);
    // Every token's gap, not the request's mean: a stall behind someone's prompt shows in
    // the tail.
    const LatencyHistogram& itl = st.inter_token_latency;
    if (itl.count() > 0) {
      static const std::vector<double> bounds_ms = [] {
        std::vector<double> ms;
        for (double b : kLatencyBuckets) ms.push_back(b * 1000);
        return ms;
      }();
      f_->itl->Add(l, kLatencyBuckets)
          .ObserveMultiple(itl.Rebucket(bounds_ms), itl.sum_ms() / 1000);
    }
  }
}

std::string Metrics::Serialize() {
  std::lock_guard<std::mutex> lock(mu_);
  {
    std::ifstream stat("/proc/stat");
    std::string cpu;
    uint64_t v[8] = {};
    if (stat >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7]) {
      uint64_t total = 0;
      for (uint64_t x : v) total += x;
      const uint64_t idle = v[3] + v[4];
      if (total > last_cpu_total_ && last_cpu_total_ > 0) {
        const double busy = 1.0 - static_cast<double>(idle - last_cpu_idle_) /
                                      static_cast<double>(total - last_cpu_total_);
        f_->cpu_util->Add({}).Set(std::clamp(busy, 0.0, 1.0));
      } else {
        f_->cpu_util->Add({}).Set(0);
      }
      last_cpu_total_ = total;
      last_cpu_idle_ = idle;
    }
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    uint64_t kb = 0, total_kb = 0, avail_kb = 0;
    while (meminfo >> key >> kb >> unit) {
      if (key == "MemTotal:") total_kb = kb;
      if (key == "MemAvailable:") avail_kb = kb;
    }
    f_->cpu_mem_total->Add({}).Set(static_cast<double>(total_kb) * 1024);
    f_->cpu_mem_used->Add({}).Set(static_cast<double>(total_kb - avail_kb) * 1024);
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace inflight::serving
