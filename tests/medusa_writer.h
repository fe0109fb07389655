// Writes Medusa heads (model/medusa.h's layout) for tests: a folder with
// medusa_lm_head.safetensors and config.json.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "safetensors_writer.h"

namespace inflight::testing {

// num_heads heads of one residual block for a model of hidden size H and V tokens. lm: every
// head's projection [V, H] with zero blocks (each head then guesses the model's own next
// token); null: random weights.
inline void WriteMedusaHeads(const std::string& dir, int num_heads, int64_t H, int64_t V,
                             const std::vector<float>* lm = nullptr) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<HfTensor> t;
  for (int k = 0; k < num_heads; ++k) {
    const std::string p = std::to_string(k) + ".";
    std::vector<float> w(H * H), b(H), out(V * H);
    for (float& x : w) x = lm ? 0.0f : normal(rng);
    for (float& x : b) x = lm ? 0.0f : normal(rng);
    if (lm) {
      out = *lm;
    } else {
      for (float& x : out) x = normal(rng) * 4;
    }
    t.push_back({p + "0.linear.weight", {H, H}, w});
    t.push_back({p + "0.linear.bias", {H}, b});
    t.push_back({p + "1.weight", {V, H}, out});
  }
  WriteSafetensors(dir + "/medusa_lm_head.safetensors", t, "F16");
  std::ofstream(dir + "/config.json")
      << "{\"medusa_num_heads\": " << num_heads << ", \"medusa_num_layers\": 1}";
}

}  // namespace inflight::testing
