// Writes EAGLE heads (model/eagle.h's layouts: EAGLE-3 as SafeAILab's checkpoints name them,
// or EAGLE-1/2 with fc_states 2) for tests: a folder with config.json and model.safetensors,
// every weight kept in the spec so a naive reference can run the same head.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "safetensors_writer.h"

namespace inflight::testing {

struct EagleHeadSpec {
  int64_t hidden = 64, target_hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96;
  int64_t vocab = 0, draft_vocab = 0;  // draft_vocab < vocab: d2t maps draft id i to 2 * i
  std::vector<int64_t> aux = {0, 1, 1};
  double rope_theta = 10000;
  bool biases = false;
  std::string prefix = "midlayer.";
  int64_t fc_states = 3;  // 2: an EAGLE-1/2 head (layers.0., no norms or lm_head of its own)
  int64_t layers = 1;
  std::string dtype = "F32";
  float scale = 0.05f;  // random weights' deviation
  // The weights, by name without the layer prefix (filled by WriteEagleHead when empty;
  // a test may set some first, e.g. a constructed lm_head).
  std::map<std::string, std::vector<float>> w;
  std::vector<int64_t> d2t;  // offsets
  bool write_d2t = true;
  // vLLM speculators' layout: layers.0. names, the layer's keys in transformer_layer_config,
  // the aux layer ids at the top, and norm_before_residual.
  bool speculators = false;
  bool norm_before_residual = false;
};

inline void WriteEagleHead(const std::string& dir, EagleHeadSpec& s) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, s.scale);
  const int64_t H = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const bool eagle1 = s.fc_states == 2;
  const int64_t attn_in = eagle1 ? H : 2 * H;
  if (eagle1) s.prefix = "layers.0.";
  if (s.draft_vocab == 0) s.draft_vocab = s.vocab;
  std::vector<HfTensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float>& v = s.w[name];
    if (v.empty()) {
      v.resize(static_cast<size_t>(n));
      for (float& x : v) x = ones ? 1.0f + normal(rng) : normal(rng);
    }
    const bool layer =
        name.rfind("fc.", 0) != 0 && name != "norm.weight" && name != "lm_head.weight";
    t.push_back({(layer ? s.prefix : "") + name, shape, v});
  };
  add("fc.weight", {H, s.fc_states * s.target_hidden});
  if (eagle1 && s.biases) add("fc.bias", {H});
  add("self_attn.q_proj.weight", {q, attn_in});
  add("self_attn.k_proj.weight", {kv, attn_in});
  add("self_attn.v_proj.weight", {kv, attn_in});
  if (s.biases) {
    add("self_attn.q_proj.bias", {q});
    add("self_attn.k_proj.bias", {kv});
    add("self_attn.v_proj.bias", {kv});
  }
  add("self_attn.o_proj.weight", {H, q});
  add("mlp.gate_proj.weight", {s.ffn, H});
  add("mlp.up_proj.weight", {s.ffn, H});
  add("mlp.down_proj.weight", {H, s.ffn});
  if (!eagle1) {
    add("input_layernorm.weight", {H}, true);
    add("hidden_norm.weight", {H}, true);
  }
  add("post_attention_layernorm.weight", {H}, true);
  if (!eagle1) {
    add("norm.weight", {H}, true);
    add("lm_head.weight", {s.draft_vocab, H});
  }
  if (s.d2t.empty() && s.draft_vocab < s.vocab && s.write_d2t) {
    for (int64_t i = 0; i < s.draft_vocab; ++i) s.d2t.push_back(i);  // draft i -> target 2 i
  }
  if (!s.d2t.empty() && s.write_d2t) t.push_back({"d2t", {s.draft_vocab}, {}, s.d2t});
  WriteSafetensors(dir + "/model.safetensors", t, s.dtype);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLMEagle3"}},
                        {"hidden_size", H},
                        {"target_hidden_size", s.target_hidden},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"intermediate_size", s.ffn},
                        {"num_hidden_layers", s.layers},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", s.rope_theta},
                        {"vocab_size", s.vocab},
                        {"draft_vocab_size", s.draft_vocab},
                        {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", s.aux}}}};
  if (eagle1) {
    // A Llama config of one layer, as EAGLE-1/2 checkpoints ship.
    for (const char* k : {"target_hidden_size", "draft_vocab_size", "eagle_config"}) cfg.erase(k);
    cfg["architectures"] = {"LlamaForCausalLM"};
    cfg["bias"] = s.biases;
  }
  if (s.speculators) {
    nlohmann::json layer = cfg;
    for (const char* k :
         {"architectures", "target_hidden_size", "draft_vocab_size", "eagle_config"})
      layer.erase(k);
    cfg = {{"architectures", {"Eagle3Speculator"}},
           {"speculators_model_type", "eagle3"},
           {"transformer_layer_config", layer},
           {"target_hidden_size", s.target_hidden},
           {"draft_vocab_size", s.draft_vocab},
           {"norm_before_residual", s.norm_before_residual},
           {"eagle_aux_hidden_state_layer_ids", s.aux}};
  }
  std::ofstream(dir + "/config.json") << cfg.dump(2);
}

}  // namespace inflight::testing
