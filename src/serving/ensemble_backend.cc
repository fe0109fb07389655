#include "serving/ensemble_backend.h"

#include <map>
#include <mutex>
#include <set>

#include "serving/model_config_util.h"

namespace inflight::serving {
namespace {

using Step = inference::ModelEnsembling::Step;
// Ensemble tensor name -> tensor. Shared, not copied: a chain copies its pool for every
// response of a decoupled step (on the LLM model's delivery thread), and the prompt tensors
// ride along.
using Pool = std::map<std::string, std::shared_ptr<const InferTensor>>;

struct Job {
  std::mutex mu;
  std::mutex emit_mu;  // keeps the client's responses in order
  ResponseSink sink;
  InferRequest request;  // the ensemble request (inputs moved into the pool)
  int64_t running = 0;   // step executions still waiting for their final response
  bool done = false;
};

class EnsembleBackend : public ModelBackend {
 public:
  EnsembleBackend(inference::ModelEnsembling steps, std::vector<std::string> outputs,
                  const BackendContext& context)
      : steps_(std::move(steps)), outputs_(std::move(outputs)), context_(context) {
    // Step i depends on step j when j's outputs feed i's inputs.
    const int n = steps_.step_size();
    depends_.resize(n);
    for (int i = 0; i < n; ++i) {
      for (const auto& [in, tensor] : steps_.step(i).input_map()) {
        for (int j = 0; j < n; ++j) {
          for (const auto& [out, produced] : steps_.step(j).output_map()) {
            if (produced == tensor) depends_[i].insert(j);
          }
        }
      }
    }
  }

  void Execute(InferRequest r, ResponseSink sink) override {
    auto job = std::make_shared<Job>();
    job->sink = std::move(sink);
    Pool pool;
    for (InferTensor& t : r.inputs) {
      const std::string name = t.name;  // the right side is evaluated (and moves t) first
      pool[name] = std::make_shared<const InferTensor>(std::move(t));
    }
    r.inputs.clear();
    if (!r.context) r.context = std::make_shared<RequestContext>();
    job->request = std::move(r);
    Launch(job, pool, /*ran=*/{}, /*trigger=*/nullptr);
    FinishIfIdle(job);
  }

 private:
  // Starts the source steps (fed by ensemble inputs only).
  void Launch(const std::shared_ptr<Job>& job, const Pool& pool, const std::set<int>& ran,
              const InferResponse* trigger) {
    for (int i = 0; i < steps_.step_size(); ++i) {
      if (depends_[i].empty()) RunStep(job, i, pool, ran, trigger);
    }
  }

  void RunStep(const std::shared_ptr<Job>& job, int index, const Pool& pool, std::set<int> ran,
               const InferResponse* trigger) {
    const Step& step = steps_.step(index);
    InferRequest sub;
    sub.model_name = step.model_name();
    sub.model_version = step.model_version();
    sub.id = job->request.id;
    sub.parameters = job->request.parameters;
    sub.cancel = job->request.cancel;
    sub.context = job->request.context;
    sub.usage = job->request.usage;
    sub.tenant = job->request.tenant;
    sub.output_credit = job->request.output_credit;  // the LLM step pauses on it
    for (const auto& [input, tensor] : step.input_map()) {
      auto it = pool.find(tensor);
      if (it == pool.end()) continue;  // an optional input the client left out
      InferTensor t = *it->second;
      t.name = input;
      sub.inputs.push_back(std::move(t));
    }
    if (trigger) {
      // What a stateful downstream step (the detokenizer) needs to know of the response.
      sub.parameters["upstream_final"] = trigger->final;
      if (auto it = trigger->parameters.find("all_generated_tokens");
          it != trigger->parameters.end()) {
        sub.parameters["all_generated_tokens"] = it->second;
      }
      for (const InferTensor& t : trigger->outputs) {
        if (t.name == "batch_index" || t.name == "sequence_index") {
          auto v = t.AsInt64();
          if (v.ok() && !v->empty()) sub.parameters[t.name] = (*v)[0];
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done) return;
      ++job->running;
    }
    ran.insert(index);
    context_.runner->Infer(std::move(sub), [this, job, index, pool, ran](InferResponse&& resp) {
      OnStepResponse(job, index, pool, ran, std::move(resp));
    });
  }

  void OnStepResponse(const std::shared_ptr<Job>& job, int index, const Pool& pool,
                      const std::set<int>& ran, InferResponse&& resp) {
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done) return;
      if (resp.final) --job->running;
    }
    if (!resp.error.ok()) {
      Fail(job, resp.error);
      return;
    }
    if (!resp.empty()) {
      Pool next = pool;
      for (const InferTensor& t : resp.outputs) {
        auto it = steps_.step(index).output_map().find(t.name);
        if (it == steps_.step(index).output_map().end()) continue;
        auto copy =
            std::make_shared<InferTensor>(t);  // resp stays whole: it triggers the next steps
        copy->name = it->second;
        next[it->second] = std::move(copy);
      }
      bool leaf = true;
      for (int i = 0; i < steps_.step_size(); ++i) leaf = leaf && !depends_[i].count(index);
      if (leaf) {
        Emit(job, next);
      } else {
        LaunchFrom(job, next, ran, index, resp);
      }
    }
    FinishIfIdle(job);
  }

  // Starts the steps fed by step `from` whose other producers have run in this chain.
  void LaunchFrom(const std::shared_ptr<Job>& job, const Pool& pool, const std::set<int>& ran,
                  int from, const InferResponse& trigger) {
    for (int i = 0; i < steps_.step_size(); ++i) {
      if (ran.count(i) || !depends_[i].count(from)) continue;
      bool ready = true;
      for (int dep : depends_[i]) ready = ready && ran.count(dep);
      if (ready) RunStep(job, i, pool, ran, &trigger);
    }
  }

  void Emit(const std::shared_ptr<Job>& job, const Pool& pool) {
    InferResponse out;
    for (const std::string& name : outputs_) {
      auto it = pool.find(name);
      if (it != pool.end() && !IsEnsembleInput(name, job)) out.outputs.push_back(*it->second);
    }
    std::lock_guard<std::mutex> emit(job->emit_mu);
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done) return;
      out.final = job->running == 0;
      if (out.final) job->done = true;
    }
    job->sink(std::move(out));
  }

  bool IsEnsembleInput(const std::string& name, const std::shared_ptr<Job>&) const {
    for (const Step& s : steps_.step()) {
      for (const auto& [out, produced] : s.output_map()) {
        if (produced == name) return false;
      }
    }
    return true;
  }

  // Ends the request with a flags-only final when nothing is running and no leaf took it.
  void FinishIfIdle(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> emit(job->emit_mu);
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done || job->running != 0) return;
      job->done = true;
    }
    InferResponse out;
    out.final = true;
    job->sink(std::move(out));
  }

  void Fail(const std::shared_ptr<Job>& job, const Status& error) {
    std::lock_guard<std::mutex> emit(job->emit_mu);
    {
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done) return;
      job->done = true;
    }
    job->request.cancel->Cancel();  // stops the other steps (the LLM frees its KV blocks)
    job->sink(ErrorResponse(error));
  }

  inference::ModelEnsembling steps_;
  std::vector<std::string> outputs_;
  BackendContext context_;
  std::vector<std::set<int>> depends_;
};

Status CheckWiring(const inference::ModelEnsembling& steps, const inference::ModelConfig& config) {
  if (steps.step_size() == 0) return InvalidArgumentError("ensemble_scheduling has no step");
  std::set<std::string> available;
  for (const auto& in : config.input()) available.insert(in.name());
  for (const auto& s : steps.step()) {
    for (const auto& [out, tensor] : s.output_map()) available.insert(tensor);
  }
  for (const auto& s : steps.step()) {
    if (s.model_name().empty())
      return InvalidArgumentError("ensemble_scheduling.step: model_name is empty");
    for (const auto& [in, tensor] : s.input_map()) {
      if (!available.count(tensor)) {
        return InvalidArgumentError("ensemble_scheduling.step '" + s.model_name() +
                                    "': input_map names tensor '" + tensor +
                                    "' that is neither an ensemble input nor a step output");
      }
    }
  }
  for (const auto& out : config.output()) {
    bool produced = false;
    for (const auto& s : steps.step()) {
      for (const auto& [o, tensor] : s.output_map()) produced = produced || tensor == out.name();
    }
    if (!produced)
      return InvalidArgumentError("ensemble output '" + out.name() +
                                  "' is not produced by any step");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<ModelBackend>> CreateEnsembleBackend(const inference::ModelConfig& config,
                                                              const BackendContext& context) {
  Status s = CheckWiring(config.ensemble_scheduling(), config);
  if (!s.ok()) return s;
  std::vector<std::string> outputs;
  for (const auto& o : config.output()) outputs.push_back(o.name());
  return std::unique_ptr<ModelBackend>(
      new EnsembleBackend(config.ensemble_scheduling(), outputs, context));
}

StatusOr<std::unique_ptr<ModelBackend>> CreateBlsBackend(const inference::ModelConfig& config,
                                                         const BackendContext& context) {
  const std::string llm = GetParameter(config, "tensorrt_llm_model_name").value_or("tensorrt_llm");
  inference::ModelEnsembling steps = ReferenceEnsembleSteps(llm, /*bls=*/true);
  std::vector<std::string> outputs;
  for (const auto& o : config.output()) outputs.push_back(o.name());
  return std::unique_ptr<ModelBackend>(new EnsembleBackend(steps, outputs, context));
}

inference::ModelEnsembling ReferenceEnsembleSteps(const std::string& llm_model_name, bool bls) {
  inference::ModelEnsembling e;
  auto* pre = e.add_step();
  pre->set_model_name("preprocessing");
  pre->set_model_version(-1);
  auto& pin = *pre->mutable_input_map();
  pin["QUERY"] = "text_input";
  pin["DECODER_QUERY"] = "decoder_text_input";
  pin["REQUEST_OUTPUT_LEN"] = "max_tokens";
  pin["BAD_WORDS_DICT"] = "bad_words";
  pin["STOP_WORDS_DICT"] = "stop_words";
  pin["EMBEDDING_BIAS_WORDS"] = "embedding_bias_words";
  pin["EMBEDDING_BIAS_WEIGHTS"] = "embedding_bias_weights";
  pin["END_ID"] = "end_id";
  pin["PAD_ID"] = "pad_id";
  pin["PROMPT_TABLE_EXTRA_ID"] = "prompt_table_extra_id";
  auto& pout = *pre->mutable_output_map();
  pout["REQUEST_INPUT_LEN"] = "_REQUEST_INPUT_LEN";
  pout["INPUT_ID"] = "_INPUT_ID";
  pout["REQUEST_DECODER_INPUT_LEN"] = "_REQUEST_DECODER_INPUT_LEN";
  pout["DECODER_INPUT_ID"] = "_DECODER_INPUT_ID";
  pout["REQUEST_OUTPUT_LEN"] = "_REQUEST_OUTPUT_LEN";
  pout["STOP_WORDS_IDS"] = "_STOP_WORDS_IDS";
  pout["BAD_WORDS_IDS"] = "_BAD_WORDS_IDS";
  pout["EMBEDDING_BIAS"] = "_EMBEDDING_BIAS";
  pout["OUT_END_ID"] = "_PREPROCESSOR_END_ID";
  pout["OUT_PAD_ID"] = "_PREPROCESSOR_PAD_ID";
  pout["OUT_PROMPT_TABLE_EXTRA_IDS"] = "_OUT_PROMPT_TABLE_EXTRA_IDS";

  auto* llm = e.add_step();
  llm->set_model_name(llm_model_name);
  llm->set_model_version(-1);
  auto& lin = *llm->mutable_input_map();
  lin["input_ids"] = "_INPUT_ID";
  lin["decoder_input_ids"] = "_DECODER_INPUT_ID";
  lin["input_lengths"] = "_REQUEST_INPUT_LEN";
  lin["decoder_input_lengths"] = "_REQUEST_DECODER_INPUT_LEN";
  lin["exclude_input_in_output"] = "exclude_input_in_output";
  lin["request_output_len"] = "_REQUEST_OUTPUT_LEN";
  lin["end_id"] = "_PREPROCESSOR_END_ID";
  lin["pad_id"] = "_PREPROCESSOR_PAD_ID";
  lin["embedding_bias"] = "_EMBEDDING_BIAS";
  lin["runtime_top_k"] = "top_k";
  lin["runtime_top_p"] = "top_p";
  lin["temperature"] = "temperature";
  lin["len_penalty"] = "length_penalty";
  for (const char* same : {"repetition_penalty",
                           "min_tokens",
                           "presence_penalty",
                           "frequency_penalty",
                           "seed",
                           "return_log_probs",
                           "return_context_logits",
                           "return_generation_logits",
                           "return_perf_metrics",
                           "num_return_sequences",
                           "beam_width",
                           "prompt_embedding_table",
                           "prompt_vocab_size",
                           "lora_task_id",
                           "lora_weights",
                           "lora_config",
                           "guided_decoding_guide_type",
                           "guided_decoding_guide",
                           "lookahead_window_size",
                           "lookahead_ngram_size",
                           "lookahead_verification_set_size"}) {
    lin[same] = same;
  }
  lin["streaming"] = "stream";
  // The reference BLS drafts with a second repository model (tensorrt_llm_draft_model_name);
  // here the engine drafts itself and num_draft_tokens caps its drafts per step.
  if (bls) lin["num_draft_tokens"] = "num_draft_tokens";
  lin["stop_words_list"] = "_STOP_WORDS_IDS";
  lin["bad_words_list"] = "_BAD_WORDS_IDS";
  lin["prompt_table_extra_ids"] = "_OUT_PROMPT_TABLE_EXTRA_IDS";
  auto& lout = *llm->mutable_output_map();
  lout["output_ids"] = "_TOKENS_BATCH";
  lout["sequence_length"] = "_SEQUENCE_LENGTH";
  for (const char* same :
       {"cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index",
        "sequence_index", "kv_cache_alloc_new_blocks", "kv_cache_reused_blocks",
        "kv_cache_alloc_total_blocks", "arrival_time_ns", "first_scheduled_time_ns",
        "first_token_time_ns", "last_token_time_ns", "acceptance_rate",
        "total_accepted_draft_tokens", "total_draft_tokens", "inter_token_latency_p50_ms",
        "inter_token_latency_p99_ms"}) {
    lout[same] = same;
  }
  auto* post = e.add_step();
  post->set_model_name("postprocessing");
  post->set_model_version(-1);
  (*post->mutable_input_map())["TOKENS_BATCH"] = "_TOKENS_BATCH";
  (*post->mutable_input_map())["SEQUENCE_LENGTH"] = "_SEQUENCE_LENGTH";
  (*post->mutable_output_map())["OUTPUT"] = "text_output";
  return e;
}

}  // namespace inflight::serving
