// llama2.c "legacy" checkpoints: 7 int32 header values, then F32 arrays in a fixed order.
#include <cstring>
#include <map>

#include "model/model.h"
#include "model/weight_utils.h"

namespace inflight {
namespace {

class MapWeightSource : public WeightSource {
 public:
  std::map<std::string, RawTensor> tensors;
  bool Has(const std::string& name) const override { return tensors.count(name) > 0; }
  StatusOr<RawTensor> Get(const std::string& name) const override {
    auto it = tensors.find(name);
    if (it == tensors.end()) return NotFoundError("tensor '" + name + "' is missing");
    return it->second;
  }
};

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadLlama2cModel(const std::string& path,
                                                  const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  auto fail = [&](const std::string& m) { return InvalidArgumentError(path + ": " + m); };
  if (file->size() < 28) return fail("file is too small for a llama2.c header");
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof(h));
  const int32_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4],
                seq_len = h[6];
  const bool shared = h[5] > 0;
  const int32_t vocab = shared ? h[5] : -h[5];
  for (int i = 0; i < 7; ++i) {
    if (i != 5 && (h[i] <= 0 || h[i] > (1 << 20)))
      return fail("header value " + std::to_string(i) +
                  " is out of range: " + std::to_string(h[i]));
  }
  if (vocab <= 0 || vocab > (1 << 22)) return fail("bad vocabulary size " + std::to_string(h[5]));
  if (dim % heads != 0 || heads % kv_heads != 0)
    return fail("dim / heads / kv_heads are inconsistent");
  auto model = std::make_unique<Model>();
  model->path_ = path;
  model->files_.push_back(file);
  ModelConfig& c = model->config_;
  c.arch = Architecture::kLlama;
  c.vocab_size = vocab;
  c.hidden_size = dim;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.ffn_size = hidden;
  c.context_length = seq_len;
  c.norm_eps = 1e-5f;
  c.rope_dim = c.head_dim;
  c.rope_style = kernels::RopeStyle::kAdjacentPairs;
  RETURN_IF_ERROR(c.Validate());

  const int64_t kv_dim = static_cast<int64_t>(dim) / heads * kv_heads;
  const int64_t head_size = dim / heads;
  // Total floats the file must hold (the two freq_cis tables included).
  const int64_t floats = int64_t{vocab} * dim +
                         int64_t{layers} * (2 * dim + 2 * int64_t{dim} * dim +
                                            2 * int64_t{dim} * kv_dim + 3 * int64_t{dim} * hidden) +
                         dim + int64_t{seq_len} * head_size + (shared ? 0 : int64_t{vocab} * dim);
  if (static_cast<uint64_t>(28 + floats * 4) > file->size()) {
    return fail("file is truncated: needs " + std::to_string(28 + floats * 4) + " bytes, has " +
                std::to_string(file->size()));
  }
  MapWeightSource src;
  const auto* p = reinterpret_cast<const float*>(file->data() + 28);
  auto take = [&](int64_t n) {
    const float* out = p;
    p += n;
    return out;
  };
  auto add = [&](const std::string& name, const float* data, std::vector<int64_t> dims) {
    src.tensors[name] = RawTensor{data, DType::kF32, std::move(dims)};
  };
  add("token_embd.weight", take(int64_t{vocab} * dim), {dim, vocab});
  struct PerLayer {
    const char* name;
    int64_t rows, cols;
  };
  // Order in the file: each kind for all layers, then the next kind.
  const PerLayer kinds[] = {{"attn_norm.weight", 1, dim},     {"attn_q.weight", dim, dim},
                            {"attn_k.weight", kv_dim, dim},   {"attn_v.weight", kv_dim, dim},
                            {"attn_output.weight", dim, dim}, {"ffn_norm.weight", 1, dim},
                            {"ffn_gate.weight", hidden, dim}, {"ffn_down.weight", dim, hidden},
                            {"ffn_up.weight", hidden, dim}};
  for (const PerLayer& k : kinds) {
    for (int l = 0; l < layers; ++l) {
      const std::string name = "blk." + std::to_string(l) + "." + k.name;
      if (k.rows == 1)
        add(name, take(k.cols), {k.cols});
      else
        add(name, take(k.rows * k.cols), {k.cols, k.rows});
    }
  }
  add("output_norm.weight", take(dim), {dim});
  take(int64_t{seq_len} * head_size);  // freq_cis_real / imag: recomputed instead
  if (!shared) add("output.weight", take(int64_t{vocab} * dim), {dim, vocab});
  RETURN_IF_ERROR(ApplyLoadOptions(options, &model->config_));
  RETURN_IF_ERROR(LoadStandardWeights(src, model.get()));
  RETURN_IF_ERROR(FinishModel(model.get(), options));
  return model;
}

}  // namespace inflight
