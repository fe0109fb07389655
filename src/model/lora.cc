#include "model/lora.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "base/fp16.h"
#include "format/safetensors.h"

namespace inflight {
namespace {

constexpr int32_t kMaxRank = 1024;

const char* ModuleName(int32_t m) {
  static const char* kNames[] = {"attn_qkv",   "attn_q",      "attn_k",      "attn_v",
                                 "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate"};
  return m >= 0 && m < kLoraNumModules ? kNames[m] : "unknown";
}

// Hugging Face's rotate-half row order to GGUF's interleaved one, within each head: row
// (half h, i) moves to 2 i + h.
void PermuteRows(std::vector<float>* b, int32_t row0, int32_t heads, int32_t head_dim,
                 int32_t cols) {
  std::vector<float> head(static_cast<size_t>(head_dim) * cols);
  for (int32_t hd = 0; hd < heads; ++hd) {
    float* base =
        b->data() + (static_cast<size_t>(row0) + static_cast<size_t>(hd) * head_dim) * cols;
    for (int32_t r = 0; r < head_dim; ++r) {
      const int32_t half = r / (head_dim / 2), i = r % (head_dim / 2);
      std::memcpy(head.data() + static_cast<size_t>(2 * i + half) * cols,
                  base + static_cast<size_t>(r) * cols, cols * sizeof(float));
    }
    std::memcpy(base, head.data(), head.size() * sizeof(float));
  }
}

}  // namespace

bool LoraModuleShape(const ModelConfig& c, int32_t module, int32_t* in, int32_t* out) {
  const int32_t H = c.hidden_size, F = c.ffn_size, qd = c.q_dim(), kvd = c.kv_dim();
  switch (module) {
    case kLoraAttnQkv:
      *in = H, *out = qd + 2 * kvd;
      return true;
    case kLoraAttnQ:
      *in = H, *out = qd;
      return true;
    case kLoraAttnK:
      *in = H, *out = kvd;
      return true;
    case kLoraAttnV:
      *in = H, *out = kvd;
      return true;
    case kLoraAttnDense:
      *in = qd, *out = H;
      return true;
    case kLoraMlpHTo4h:
      *in = H, *out = F;
      return true;
    case kLoraMlp4hToH:
      *in = F, *out = H;
      return true;
    case kLoraMlpGate:
      *in = H, *out = F;
      return !c.gelu_ffn;
    default:
      return false;
  }
}

Status LoraAdapter::Add(const ModelConfig& c, int32_t layer, int32_t module, LoraMatrix m) {
  int32_t in = 0, out = 0;
  if (!LoraModuleShape(c, module, &in, &out)) {
    return InvalidArgumentError("LoRA module id " + std::to_string(module) +
                                " is not one this model has (0-" +
                                std::to_string(c.gelu_ffn ? 6 : 7) + ")");
  }
  if (c.num_experts > 0 && module >= kLoraMlpHTo4h) {
    return UnimplementedError(std::string("LoRA ") + ModuleName(module) +
                              ": adapters on the FFN of a mixture-of-experts model are not "
                              "supported (attention modules are)");
  }
  if (layer < 0 || layer >= c.num_layers) {
    return InvalidArgumentError("LoRA layer " + std::to_string(layer) + " is outside the model's " +
                                std::to_string(c.num_layers) + " layers");
  }
  if (m.rank < 1 || m.rank > kMaxRank) {
    return InvalidArgumentError("LoRA adapter size " + std::to_string(m.rank) + " of " +
                                ModuleName(module) + " must be in [1, " + std::to_string(kMaxRank) +
                                "]");
  }
  if (m.in != in || m.out != out) {
    return InvalidArgumentError(std::string("LoRA ") + ModuleName(module) + " of layer " +
                                std::to_string(layer) + " is " + std::to_string(m.out) + " x " +
                                std::to_string(m.in) + "; the model's projection is " +
                                std::to_string(out) + " x " + std::to_string(in));
  }
  if (layers_.empty()) layers_.resize(c.num_layers);
  if (layers_[layer][module].rank > 0) {
    return InvalidArgumentError(std::string("LoRA ") + ModuleName(module) + " of layer " +
                                std::to_string(layer) + " is given twice");
  }
  for (float v : m.a)
    if (!std::isfinite(v)) return InvalidArgumentError("LoRA weights hold a non-finite value");
  for (float v : m.b)
    if (!std::isfinite(v)) return InvalidArgumentError("LoRA weights hold a non-finite value");
  if (c.rope_style == kernels::RopeStyle::kAdjacentPairs && !c.learned_positions &&
      c.rope_dim == c.head_dim) {
    if (module == kLoraAttnQ || module == kLoraAttnQkv)
      PermuteRows(&m.b, 0, c.num_heads, c.head_dim, m.rank);
    if (module == kLoraAttnK) PermuteRows(&m.b, 0, c.num_kv_heads, c.head_dim, m.rank);
    if (module == kLoraAttnQkv) PermuteRows(&m.b, c.q_dim(), c.num_kv_heads, c.head_dim, m.rank);
  }
  bytes_ += (m.a.size() + m.b.size()) * sizeof(float);
  layers_[layer][module] = std::move(m);
  return OkStatus();
}

LoraAdapter::LoraAdapter() {
  static std::atomic<uint64_t> next{1};
  id_ = next.fetch_add(1);
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromMatrices(
    const ModelConfig& c, std::vector<std::array<LoraMatrix, kLoraNumModules>> layers) {
  if (static_cast<int32_t>(layers.size()) != c.num_layers) {
    return InvalidArgumentError("a LoRA adapter of " + std::to_string(layers.size()) +
                                " layers for a model of " + std::to_string(c.num_layers));
  }
  auto adapter = std::shared_ptr<LoraAdapter>(new LoraAdapter());
  for (int32_t module = 0; module < kLoraNumModules; ++module) {
    int32_t in = 0, out = 0;
    const bool exists = LoraModuleShape(c, module, &in, &out);
    for (auto& layer : layers) {
      const LoraMatrix& m = layer[module];
      if (m.rank == 0 && m.a.empty() && m.b.empty()) continue;
      if (!exists || m.rank < 1 || m.rank > kMaxRank || m.in != in || m.out != out ||
          m.a.size() != static_cast<size_t>(m.rank) * in ||
          m.b.size() != static_cast<size_t>(m.rank) * out) {
        return InvalidArgumentError("a LoRA matrix of module " + std::to_string(module) +
                                    " has a shape this model does not have");
      }
      adapter->bytes_ += (m.a.size() + m.b.size()) * sizeof(float);
    }
  }
  adapter->layers_ = std::move(layers);
  return std::shared_ptr<const LoraAdapter>(adapter);
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromTensors(
    const ModelConfig& c, const std::vector<float>& weights, int64_t rows, int64_t cols,
    const std::vector<int32_t>& config) {
  if (rows <= 0 || cols <= 0 || static_cast<int64_t>(weights.size()) != rows * cols) {
    return InvalidArgumentError("lora_weights must be [modules, row size] with at least one row");
  }
  if (static_cast<int64_t>(config.size()) != rows * 3) {
    return InvalidArgumentError(
        "lora_config must be [" + std::to_string(rows) +
        ", 3] (module id, layer, adapter size), one row per lora_weights row");
  }
  auto adapter = std::shared_ptr<LoraAdapter>(new LoraAdapter());
  adapter->layers_.resize(c.num_layers);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t module = config[r * 3], layer = config[r * 3 + 1], size = config[r * 3 + 2];
    LoraMatrix m;
    m.rank = size;
    if (!LoraModuleShape(c, module, &m.in, &m.out)) {
      return InvalidArgumentError("lora_config row " + std::to_string(r) + ": module id " +
                                  std::to_string(module) + " is not one this model has");
    }
    const int64_t need = static_cast<int64_t>(size) * (m.in + m.out);
    if (size < 1 || size > kMaxRank || need > cols) {
      return InvalidArgumentError("lora_config row " + std::to_string(r) + ": adapter size " +
                                  std::to_string(size) + " needs " + std::to_string(need) +
                                  " weights per row; lora_weights rows hold " +
                                  std::to_string(cols));
    }
    const float* row = weights.data() + r * cols;
    m.a.assign(row, row + static_cast<int64_t>(size) * m.in);
    m.b.assign(row + static_cast<int64_t>(size) * m.in, row + need);
    RETURN_IF_ERROR(adapter->Add(c, layer, module, std::move(m)));
  }
  return std::shared_ptr<const LoraAdapter>(adapter);
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromPeftFolder(const ModelConfig& c,
                                                                         const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  std::ifstream in(config_path);
  if (!in) return NotFoundError("LoRA folder '" + dir + "' has no adapter_config.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json cfg = nlohmann::json::parse(text.str(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    return InvalidArgumentError(config_path.string() + " is not valid JSON");
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || !cfg.contains("lora_alpha") ||
      !cfg["lora_alpha"].is_number()) {
    return InvalidArgumentError(config_path.string() +
                                " needs integer 'r' and number 'lora_alpha'");
  }
  const double r = cfg["r"].get<double>(), alpha = cfg["lora_alpha"].get<double>();
  if (r < 1) return InvalidArgumentError(config_path.string() + ": 'r' must be >= 1");
  if (cfg.contains("use_rslora") && !cfg["use_rslora"].is_boolean())
    return InvalidArgumentError(config_path.string() + ": 'use_rslora' must be a boolean");
  const bool rslora = cfg.value("use_rslora", false);
  const float scale = static_cast<float>(rslora ? alpha / std::sqrt(r) : alpha / r);
  if (cfg.contains("rank_pattern") && cfg["rank_pattern"].is_object() &&
      !cfg["rank_pattern"].empty()) {
    return InvalidArgumentError(config_path.string() +
                                ": per-module rank_pattern is not supported");
  }
  const fs::path weights_path = fs::path(dir) / "adapter_model.safetensors";
  auto file = SafetensorsFile::Open(weights_path.string());
  if (!file.ok()) return file.status();
  static const std::regex kName(
      R"((?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.lora_([AB])(?:\.default)?\.weight$)");
  static const std::map<std::string, int32_t> kModules = {
      {"q_proj", kLoraAttnQ},     {"k_proj", kLoraAttnK},       {"v_proj", kLoraAttnV},
      {"o_proj", kLoraAttnDense}, {"gate_proj", kLoraMlpHTo4h}, {"down_proj", kLoraMlp4hToH},
      {"up_proj", kLoraMlpGate}};
  std::map<std::pair<int32_t, int32_t>, LoraMatrix> found;
  for (const auto& [name, t] : (*file)->tensors()) {
    std::smatch m;
    if (!std::regex_search(name, m, kName)) {
      return InvalidArgumentError(weights_path.string() + ": tensor '" + name +
                                  "' is not a LoRA A/B of q/k/v/o/gate/up/down_proj");
    }
    const int32_t layer = std::stoi(m[1].str());
    const int32_t module = kModules.at(m[2].str());
    const bool is_a = m[3].str() == "A";
    if (t.shape.size() != 2)
      return InvalidArgumentError(weights_path.string() + ": '" + name + "' is not 2-D");
    auto dtype = DTypeFromSafetensors(t.dtype);
    if (!dtype || (*dtype != DType::kF32 && *dtype != DType::kF16 && *dtype != DType::kBF16)) {
      return InvalidArgumentError(weights_path.string() + ": '" + name + "' is " + t.dtype +
                                  "; F32, F16 or BF16 are read");
    }
    const int64_t n = t.shape[0] * t.shape[1];
    const size_t width = *dtype == DType::kF32 ? 4 : 2;
    if (t.shape[0] <= 0 || t.shape[1] <= 0 || t.num_bytes != static_cast<uint64_t>(n) * width) {
      return InvalidArgumentError(weights_path.string() + ": '" + name +
                                  "' has a bad shape or size");
    }
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (*dtype == DType::kF32) {
        std::memcpy(&v[i], t.data + i * 4, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, t.data + i * 2, 2);
        v[i] = *dtype == DType::kF16 ? Fp16ToFp32(h) : Bf16ToFp32(h);
      }
    }
    LoraMatrix& lm = found[{layer, module}];
    if (is_a) {
      lm.rank = static_cast<int32_t>(t.shape[0]);
      lm.in = static_cast<int32_t>(t.shape[1]);
      lm.a = std::move(v);
    } else {
      lm.out = static_cast<int32_t>(t.shape[0]);
      if (lm.rank == 0) lm.rank = static_cast<int32_t>(t.shape[1]);
      if (t.shape[1] != lm.rank)
        return InvalidArgumentError(weights_path.string() + ": '" + name +
                                    "' does not match its lora_A's rank");
      for (float& x : v) x *= scale;
      lm.b = std::move(v);
    }
  }
  if (found.empty()) return InvalidArgumentError(weights_path.string() + " holds no LoRA weights");
  auto adapter = std::shared_ptr<LoraAdapter>(new LoraAdapter());
  adapter->layers_.resize(c.num_layers);
  for (auto& [key, lm] : found) {
    if (lm.a.empty() || lm.b.empty() ||
        static_cast<int64_t>(lm.b.size()) != static_cast<int64_t>(lm.out) * lm.rank) {
      return InvalidArgumentError(weights_path.string() + ": layer " + std::to_string(key.first) +
                                  " " + ModuleName(key.second) +
                                  " lacks its lora_A or lora_B, or their ranks differ");
    }
    RETURN_IF_ERROR(adapter->Add(c, key.first, key.second, std::move(lm)));
  }
  return std::shared_ptr<const LoraAdapter>(adapter);
}

}  // namespace inflight
