#include "model/medusa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fp16.h"
#include "format/safetensors.h"
#include "kernels/interleave.h"
#include "kernels/quantize.h"
#include "model/head_weights.h"
#include "model/model.h"

namespace inflight {
namespace {

constexpr int32_t kMaxHeads = 16, kMaxBlocks = 8;

}  // namespace

MedusaHeads::~MedusaHeads() = default;

StatusOr<std::unique_ptr<MedusaHeads>> MedusaHeads::Load(const std::string& path,
                                                         const ModelConfig& base, DType weights) {
  RETURN_IF_ERROR(HeadWeights::CheckWeightType("medusa heads", weights));
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  int64_t want_heads = -1, want_layers = -1;
  if (fs::is_directory(path, ec)) {
    file = path + "/medusa_lm_head.safetensors";
    std::ifstream in(path + "/config.json");
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object())
        return InvalidArgumentError("medusa heads: " + path + "/config.json is not a JSON object");
      auto read = [&](const char* key, int64_t* out) -> Status {
        if (!j.contains(key)) return OkStatus();
        if (!j[key].is_number_integer())
          return InvalidArgumentError(std::string("medusa heads: config.json's ") + key +
                                      " is not a whole number");
        *out = j[key].get<int64_t>();
        return OkStatus();
      };
      RETURN_IF_ERROR(read("medusa_num_heads", &want_heads));
      RETURN_IF_ERROR(read("medusa_num_layers", &want_layers));
      int64_t hidden = -1, vocab = -1;
      RETURN_IF_ERROR(read("hidden_size", &hidden));
      RETURN_IF_ERROR(read("vocab_size", &vocab));
      if (hidden >= 0 && hidden != base.hidden_size) {
        return InvalidArgumentError("medusa heads: config.json's hidden_size " +
                                    std::to_string(hidden) + " differs from the model's " +
                                    std::to_string(base.hidden_size));
      }
      if (vocab >= 0 && vocab != base.vocab_size) {
        return InvalidArgumentError("medusa heads: config.json's vocab_size " +
                                    std::to_string(vocab) +
                                    " differs from the model's vocabulary (" +
                                    std::to_string(base.vocab_size) + " tokens)");
      }
    }
  }
  auto opened = SafetensorsFile::Open(file);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<MedusaHeads> m(new MedusaHeads());
  m->file_ = std::move(opened).value();
  m->hidden_ = base.hidden_size;
  m->vocab_ = base.vocab_size;
  const auto& tensors = m->file_->tensors();
  // Heads and blocks as the names hold them: "{k}.{j}.linear.weight", "{k}.{L}.weight".
  int32_t heads = 0;
  while (heads < kMaxHeads && tensors.count(std::to_string(heads) + ".0.linear.weight") +
                                      tensors.count(std::to_string(heads) + ".0.weight") >
                                  0)
    ++heads;
  if (heads == 0) {
    return NotFoundError("medusa heads: " + file +
                         " holds no head (tensors named 0.0.linear.weight, ...)");
  }
  int32_t blocks = 0;
  while (blocks < kMaxBlocks && tensors.count("0." + std::to_string(blocks) + ".linear.weight") > 0)
    ++blocks;
  if (want_heads >= 0 && want_heads != heads) {
    return InvalidArgumentError("medusa heads: config.json says medusa_num_heads " +
                                std::to_string(want_heads) + " but the file holds " +
                                std::to_string(heads) + " heads");
  }
  if (want_layers >= 0 && want_layers != blocks) {
    return InvalidArgumentError("medusa heads: config.json says medusa_num_layers " +
                                std::to_string(want_layers) + " but the heads hold " +
                                std::to_string(blocks) + " residual blocks");
  }
  m->num_layers_ = blocks;
  const int64_t H = base.hidden_size, V = base.vocab_size;
  HeadWeights hw("medusa heads", *m->file_, weights);
  const std::string hidden_what =
      "the model's hidden size is " + std::to_string(H) + " (heads made for another model?)";
  const std::string vocab_what = "the model's vocabulary is " + std::to_string(V) +
                                 " tokens and its hidden size " + std::to_string(H);
  for (int32_t k = 0; k < heads; ++k) {
    Head head;
    const std::string p = std::to_string(k) + ".";
    for (int32_t j = 0; j < blocks; ++j) {
      const std::string b = p + std::to_string(j) + ".linear.";
      auto w = hw.Get(b + "weight", {H, H}, hidden_what.c_str());
      if (!w.ok()) return w.status();
      auto bias = hw.Get(b + "bias", {H}, hidden_what.c_str());
      if (!bias.ok()) return bias.status();
      head.w.push_back(hw.Matrix(**w));
      head.b.push_back(HeadWeights::ToFloats(**bias));
    }
    auto lm = hw.Get(p + std::to_string(blocks) + ".weight", {V, H}, vocab_what.c_str());
    if (!lm.ok()) return lm.status();
    head.lm = hw.Matrix(**lm);
    m->heads_.push_back(std::move(head));
  }
  m->owned_ = std::move(hw.owned());
  return m;
}

int64_t MedusaHeads::WeightBytes() const {
  int64_t n = 0;
  for (const Head& h : heads_) {
    for (const TensorView& w : h.w) n += w.num_bytes();
    n += h.lm.num_bytes();
  }
  return n;
}

void MedusaHeads::TopK(const float* hidden, int64_t rows, int32_t top_k, std::vector<int32_t>* out,
                       ThreadPool& pool) {
  const int64_t H = hidden_, V = vocab_, K = num_heads();
  top_k = std::clamp<int32_t>(top_k, 1, static_cast<int32_t>(V));
  out->assign(static_cast<size_t>(rows * K * top_k), 0);
  if (rows == 0) return;
  h_.resize(static_cast<size_t>(rows * H));
  t_.resize(static_cast<size_t>(rows * H));
  logits_.resize(static_cast<size_t>(rows * V));
  std::vector<std::pair<float, int32_t>> best;
  for (int64_t k = 0; k < K; ++k) {
    const Head& head = heads_[k];
    std::copy(hidden, hidden + rows * H, h_.begin());
    for (size_t j = 0; j < head.w.size(); ++j) {
      // h += SiLU(W h + b)
      kernels::MatMul(head.w[j], h_.data(), rows, t_.data(), pool, scratch_);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < H; ++i) {
          const float z = t_[r * H + i] + head.b[j][i];
          h_[r * H + i] += z / (1.0f + std::exp(-z));
        }
      }
    }
    kernels::MatMul(head.lm, h_.data(), rows, logits_.data(), pool, scratch_);
    for (int64_t r = 0; r < rows; ++r) {
      // The top_k largest logits, ties to the lower id (as ArgMax).
      const float* l = logits_.data() + r * V;
      best.clear();
      for (int32_t v = 0; v < V; ++v) {
        if (static_cast<int32_t>(best.size()) == top_k && l[v] <= best.back().first) continue;
        auto at = std::upper_bound(best.begin(), best.end(), std::make_pair(l[v], v),
                                   [](const auto& a, const auto& b) { return a.first > b.first; });
        best.insert(at, {l[v], v});
        if (static_cast<int32_t>(best.size()) > top_k) best.pop_back();
      }
      int32_t* dst = out->data() + (r * K + k) * top_k;
      for (int32_t i = 0; i < top_k; ++i)
        dst[i] = best[std::min<size_t>(i, best.size() - 1)].second;
    }
  }
}

Status WriteMedusaHeads(const std::string& dir, const Model& base, int num_heads, bool copy_output,
                        ThreadPool& pool) {
  const int64_t H = base.config().hidden_size, V = base.config().vocab_size;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::vector<float> block(static_cast<size_t>(H * H)), bias(static_cast<size_t>(H)),
      lm(static_cast<size_t>(V * H));
  CheapNormal draw(3);
  auto normal = [&] { return draw.Next() * 0.087f; };  // N(0, ~0.05)
  if (copy_output) lm = OutputProjectionFloats(base, pool);
  std::vector<std::vector<float>> keep;
  std::vector<SafetensorsOut> out;
  for (int k = 0; k < num_heads; ++k) {
    const std::string p = std::to_string(k) + ".";
    for (float& x : block) x = copy_output ? 0.0f : normal();
    for (float& x : bias) x = copy_output ? 0.0f : normal();
    if (!copy_output)
      for (float& x : lm) x = 4 * normal();
    keep.push_back(block);
    out.push_back({p + "0.linear.weight", {H, H}, keep.back().data()});
    keep.push_back(bias);
    out.push_back({p + "0.linear.bias", {H}, keep.back().data()});
    keep.push_back(lm);
    out.push_back({p + "1.weight", {V, H}, keep.back().data()});
  }
  // keep's buffers moved when it grew: point at them once it is whole.
  for (size_t i = 0; i < out.size(); ++i) out[i].values = keep[i].data();
  RETURN_IF_ERROR(WriteSafetensorsF16(dir + "/medusa_lm_head.safetensors", out));
  std::ofstream(dir + "/config.json")
      << "{\"medusa_num_heads\": " << num_heads
      << ", \"medusa_num_layers\": 1, \"hidden_size\": " << H << ", \"vocab_size\": " << V << "}";
  return OkStatus();
}

StatusOr<std::vector<std::vector<int32_t>>> CheckMedusaChoices(
    std::vector<std::vector<int32_t>> paths, int32_t num_heads, int32_t top_k_limit,
    int32_t max_nodes, const std::string& field) {
  const std::string per_head = field == "medusa_choices" ? " (one per head)" : "";
  if (static_cast<int64_t>(paths.size()) > max_nodes) {
    return InvalidArgumentError(field + " holds " + std::to_string(paths.size()) +
                                " paths; at most " + std::to_string(max_nodes));
  }
  for (const auto& path : paths) {
    if (path.empty() || static_cast<int64_t>(path.size()) > num_heads) {
      return InvalidArgumentError(field + ": each path is a list of 1 to " +
                                  std::to_string(num_heads) + " top-k indices" + per_head);
    }
    for (int32_t i : path) {
      if (i < 0 || i >= top_k_limit) {
        return InvalidArgumentError(field + ": a top-k index must be in [0, " +
                                    std::to_string(top_k_limit - 1) + "]");
      }
    }
  }
  // Shorter paths first (then in order): a prefix always comes before its extensions.
  std::stable_sort(paths.begin(), paths.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  for (size_t i = 0; i < paths.size(); ++i) {
    if (std::find(paths.begin(), paths.begin() + i, paths[i]) != paths.begin() + i)
      return InvalidArgumentError(field + ": a path is given twice");
    if (paths[i].size() > 1) {
      const std::vector<int32_t> prefix(paths[i].begin(), paths[i].end() - 1);
      if (std::find(paths.begin(), paths.begin() + i, prefix) == paths.begin() + i)
        return InvalidArgumentError(field + ": a path's prefix is missing");
    }
  }
  return paths;
}

StatusOr<std::vector<std::vector<int32_t>>> ParseMedusaChoices(const std::string& text,
                                                               int32_t num_heads, int32_t max_nodes,
                                                               const std::string& field) {
  const std::string per_head = field == "medusa_choices" ? " (one per head)" : "";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    return InvalidArgumentError(field + " must be a JSON list of lists, e.g. [[0], [0, 0]]");
  if (static_cast<int64_t>(j.size()) > max_nodes) {
    return InvalidArgumentError(field + " holds " + std::to_string(j.size()) + " paths; at most " +
                                std::to_string(max_nodes));
  }
  std::vector<std::vector<int32_t>> paths;
  for (const auto& p : j) {
    if (!p.is_array() || p.empty() || static_cast<int64_t>(p.size()) > num_heads) {
      return InvalidArgumentError(field + ": each path is a list of 1 to " +
                                  std::to_string(num_heads) + " top-k indices" + per_head);
    }
    std::vector<int32_t> path;
    for (const auto& i : p) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= 64)
        return InvalidArgumentError(field + ": a top-k index must be in [0, 63]");
      path.push_back(static_cast<int32_t>(i.get<int64_t>()));
    }
    paths.push_back(std::move(path));
  }
  return CheckMedusaChoices(std::move(paths), num_heads, 64, max_nodes, field);
}

std::vector<std::vector<int32_t>> DefaultMedusaChoices(int32_t num_heads) {
  static const std::vector<std::vector<int32_t>> kTree = {
      {0},       {1},       {2},       {0, 0},       {0, 1},       {1, 0},       {0, 0, 0},
      {0, 0, 1}, {0, 1, 0}, {1, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}, {0, 0, 1, 0}, {0, 1, 0, 0}};
  std::vector<std::vector<int32_t>> out;
  for (const auto& path : kTree)
    if (static_cast<int32_t>(path.size()) <= num_heads) out.push_back(path);
  return out;
}

}  // namespace inflight
