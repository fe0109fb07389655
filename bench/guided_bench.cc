// Guided decoding's cost per step against the decode step it rides on, measured in one run:
// the decode step of the 1.1B model (Q4_K_M, Llama 2's 32,000-token vocabulary) after a
// 512-token prompt, and per guide (a nested JSON schema, free-form JSON, a regex) the time
// to mask the logits and advance the guide, over random walks of the guide (cold: every
// automaton state met for the first time; warm: the same walks again, masks cached). Last,
// the engine itself: a guided request's decode tokens/s against an unguided one's.
//
// Usage: guided_bench [--preset tinyllama-1.1b --dtype q4_k_m] [--tokenizer PATH] [--walks 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_models.h"
#include "engine/executor.h"
#include "guided/guide.h"
#include "tokenizer/tokenizer.h"

using namespace inflight;

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct StepCost {
  double mean_us = 0, max_us = 0, p99_us = 0;
  int64_t steps = 0;
};

StepCost Summarize(std::vector<double> us) {
  StepCost c;
  if (us.empty()) return c;
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  c.mean_us = sum / us.size();
  c.max_us = us.back();
  c.p99_us = us[static_cast<size_t>(0.99 * (us.size() - 1))];
  c.steps = static_cast<int64_t>(us.size());
  return c;
}

// Random walks through the guide (uniform over the allowed tokens), recorded so the warm
// pass replays the same tokens; returns the per-step mask + advance times.
std::vector<double> Walk(guided::Guide& g, int32_t vocab, int walks, uint64_t seed,
                         std::vector<std::vector<int32_t>>* paths, bool replay) {
  std::vector<double> us;
  std::vector<float> logits(vocab);
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    auto c = g.NewConstraint();
    std::vector<int32_t>& path = (*paths)[w];
    for (size_t step = 0; step < 256; ++step) {
      if (replay && step >= path.size()) break;
      std::fill(logits.begin(), logits.end(), 0.0f);
      const auto t0 = Clock::now();
      const int32_t allowed = c->Mask(logits.data(), vocab, -1);
      int32_t pick = -1;
      if (replay) {
        pick = path[step];
      } else if (allowed > 0) {
        int32_t k = static_cast<int32_t>(rng() % allowed);
        for (int32_t t = 0; t < vocab; ++t) {
          if (logits[t] == 0.0f && k-- == 0) {
            pick = t;
            break;
          }
        }
      }
      if (pick >= 0) c->Advance(pick);
      // Terminated() computes the next state's mask (the engine asks it after each token).
      const bool done = pick < 0 || c->Terminated();
      us.push_back(Ms(Clock::now() - t0) * 1000.0);
      if (pick < 0) break;
      if (!replay) path.push_back(pick);
      if (done) break;
    }
  }
  return us;
}

double DecodeMsPerToken(const Model& model, const std::vector<int32_t>& prompt, int32_t max_tokens,
                        std::shared_ptr<const TokenConstraint> guide, int32_t* generated) {
  ExecutorConfig c;
  c.max_tokens_in_paged_kv_cache = 4096;
  auto e = Executor::Create(model, c);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  Request r;
  r.prompt_ids = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  r.exclude_input_in_output = true;
  r.guide = std::move(guide);
  auto id = (*e)->Enqueue(r);
  if (!id.ok()) {
    std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
    std::exit(1);
  }
  while (true) {
    for (Result& res : (*e)->AwaitResponses(*id, std::chrono::milliseconds(1000))) {
      if (!res.is_final) continue;
      *generated = res.stats.num_generated_tokens;
      return res.stats.decode_ms() / std::max(1, res.stats.num_generated_tokens - 1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "tinyllama-1.1b", dtype = "q4_k_m", model_dir = "bench-models";
  std::string tokenizer = std::string(INFLIGHT_SOURCE_DIR) +
                          "/../shared/models/tokenizers/llama2-sentencepiece/tokenizer.model";
  int walks = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--preset")
      preset = v;
    else if (f == "--dtype")
      dtype = v;
    else if (f == "--tokenizer")
      tokenizer = v;
    else if (f == "--model-dir")
      model_dir = v;
    else if (f == "--walks")
      walks = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  auto model = LoadOrWriteRandomModel(model_dir + "/" + preset + "-random-" + dtype + ".gguf",
                                      preset, dtype, tokenizer);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const Model& m = **model;
  const int32_t vocab = m.config().vocab_size;
  auto gv = guided::GuideVocabulary::FromTokenizer(*m.tokenizer());
  std::vector<int32_t> prompt(512);
  std::mt19937 rng(3);
  for (auto& t : prompt) t = static_cast<int32_t>(3 + rng() % (vocab - 3));

  // The decode step the mask rides on (unguided, after 512 tokens).
  int32_t gen = 0;
  const double step_ms = DecodeMsPerToken(m, prompt, 64, nullptr, &gen);
  std::printf("model %s, vocab %d: decode step after %zu tokens %.2f ms\n\n", m.Describe().c_str(),
              vocab, prompt.size(), step_ms);

  const std::vector<std::pair<std::string, std::pair<guided::GuideType, std::string>>> guides = {
      {"json_schema (nested)",
       {guided::GuideType::kJsonSchema,
        R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150}, "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 5}, "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}, "required": ["name", "age"]})"}},
      {"json (free-form)", {guided::GuideType::kJson, ""}},
      {"regex (dates, words)",
       {guided::GuideType::kRegex, "(19|20)[0-9]{2}-[01][0-9]-[0-3][0-9]( [A-Za-z]{1,12}){1,20}"}},
      {"ebnf_grammar (JSON)", {guided::GuideType::kEbnf, R"G(root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )?
ws ::= [ \n]{0,4}
)G"}},
  };
  std::printf(
      "| guide | compile ms | cold mean / p99 / max us | warm mean / p99 / max us | warm mean vs "
      "step | steps |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& [name, g] : guides) {
    const auto t0 = Clock::now();
    auto compiled = guided::Guide::Compile(g.first, g.second, gv);
    const double compile_ms = Ms(Clock::now() - t0);
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), compiled.status().ToString().c_str());
      return 1;
    }
    std::vector<std::vector<int32_t>> paths(walks);
    const StepCost cold = Summarize(Walk(**compiled, vocab, walks, 11, &paths, false));
    const StepCost warm = Summarize(Walk(**compiled, vocab, walks, 11, &paths, true));
    std::printf("| %s | %.1f | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.2f%% | %lld |\n",
                name.c_str(), compile_ms, cold.mean_us, cold.p99_us, cold.max_us, warm.mean_us,
                warm.p99_us, warm.max_us, 100.0 * warm.mean_us / 1000.0 / step_ms,
                static_cast<long long>(warm.steps));
  }

  // In the engine: guided (a long regex, so every request decodes the same count) vs not,
  // interleaved.
  auto long_guide = guided::Guide::Compile(guided::GuideType::kRegex, "[a-z ,.]{1000}", gv);
  if (!long_guide.ok()) {
    std::fprintf(stderr, "%s\n", long_guide.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "\nengine decode after 512 tokens, 64 tokens, ms/token (guided [a-z ,.]{1000} vs "
      "unguided):\n");
  for (int rep = 0; rep < 3; ++rep) {
    int32_t g1 = 0, g2 = 0;
    const double plain = DecodeMsPerToken(m, prompt, 64, nullptr, &g1);
    const double guided = DecodeMsPerToken(
        m, prompt, 64, std::shared_ptr<const TokenConstraint>((*long_guide)->NewConstraint()), &g2);
    std::printf("  rep %d: unguided %.2f ms (%d tokens), guided %.2f ms (%d tokens): %+.1f%%\n",
                rep, plain, g1, guided, g2, 100.0 * (guided / plain - 1.0));
  }
  return 0;
}
