// inflight-bench workloads: prompts of exact token lengths for the served tokenizer, a JSON
// dataset, or prompts sharing a prefix (prefix-cache tests).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "clients/llm_client.h"
#include "tokenizer/tokenizer.h"

namespace inflight::bench {

struct BenchItem {
  clients::GenRequest request;
  int64_t input_tokens = 0;
  std::string reference_output;  // from a dataset, if given
};

struct WorkloadOptions {
  int64_t num_requests = 100;
  uint64_t seed = 0;
  int64_t max_input_len = 4096;  // longer prompts are dropped (as the reference does)
  bool token_ids = false;        // requests carry input_ids (gRPC / tensorrt_llm) instead of text
  int32_t vocab_size = 0;        // random ids without a tokenizer (token_ids only)
};

// A prompt of exactly `n` tokens (BOS included when the tokenizer adds one): single-token
// words drawn at random, checked by encoding. Without a tokenizer, random ids below vocab_size.
class PromptMaker {
 public:
  PromptMaker(const Tokenizer* tok, int32_t vocab_size, uint64_t seed);
  // INVALID_ARGUMENT when no exact prompt of that length can be made.
  StatusOr<BenchItem> Make(int64_t n, bool token_ids);
  std::mt19937_64& rng() { return rng_; }

 private:
  const Tokenizer* tok_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<int32_t> words_;  // ids of tokens that are a whole word with a leading space
};

// long_fraction of the prompts (chosen at random) get long_input_len tokens instead: a mix of
// long and short prompts for chunked-context measurements.
StatusOr<std::vector<BenchItem>> TokenNormDist(PromptMaker& maker, const WorkloadOptions& o,
                                               double input_mean, double input_stdev,
                                               double output_mean, double output_stdev,
                                               double long_fraction = 0,
                                               int64_t long_input_len = 0);
// FILE: a JSON list of {"prompt": s, "output"?: s, "max_tokens"?: n}.
StatusOr<std::vector<BenchItem>> Dataset(const std::string& file, const Tokenizer* tok,
                                         const WorkloadOptions& o, int32_t default_output_len);
// N prompts that share their first prefix_len tokens, each with its own suffix.
StatusOr<std::vector<BenchItem>> SharedPrefix(PromptMaker& maker, const WorkloadOptions& o,
                                              int64_t prefix_len, int64_t suffix_len,
                                              int32_t output_len);

}  // namespace inflight::bench
