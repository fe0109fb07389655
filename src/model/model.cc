#include "model/model.h"

#include <map>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <cstring>
#include <sstream>

#include "base/thread_pool.h"
#include "kernels/interleave.h"
#include "kernels/ops.h"

namespace inflight {

int64_t BatchPlan::num_tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.num_tokens;
  return n;
}

int64_t BatchPlan::num_logit_rows() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.num_logits;
  return n;
}

void ForwardScratch::Reserve(const ModelConfig& c, int64_t num_tokens, int32_t tokens_per_block,
                             int num_threads) {
  if (tokens_per_block > capacity_block_ || num_threads > capacity_threads_) {
    tokens_per_block = std::max(tokens_per_block, capacity_block_);
    num_threads = std::max(num_threads, capacity_threads_);
    attention_.Resize(kernels::AttentionScratchFloats({c.num_heads, c.num_kv_heads, c.head_dim, 1.0f}, num_threads,
                                                      tokens_per_block) *
                      sizeof(float));
    attention = attention_.as<float>();
    capacity_block_ = tokens_per_block;
    capacity_threads_ = num_threads;
  }
  // Grow geometrically: reallocating (and zeroing) the activations on every larger step
  // costs milliseconds.
  if (num_tokens <= capacity_tokens_) return;
  num_tokens = std::max(num_tokens, 2 * capacity_tokens_);
  const int64_t wide = std::max<int64_t>(c.hidden_size, c.q_dim());
  const int64_t sizes[] = {num_tokens * c.hidden_size,
                           num_tokens * wide,
                           num_tokens * (c.q_dim() + 2 * c.kv_dim()),
                           num_tokens * c.kv_dim(),
                           num_tokens * c.kv_dim(),
                           num_tokens * c.q_dim(),
                           num_tokens * c.ffn_size,
                           num_tokens * c.ffn_size,
                           num_tokens * c.hidden_size,
                           num_tokens * c.rope_dim};
  int64_t total = 0;
  for (int64_t s : sizes) total += (s + 15) / 16 * 16;
  buffer_.Resize(total * sizeof(float));
  float* p = buffer_.as<float>();
  float** slots[] = {&x, &h, &q, &k, &v, &attn, &gate, &up, &out, &rope_angles};
  for (int i = 0; i < 10; ++i) {
    *slots[i] = p;
    p += (sizes[i] + 15) / 16 * 16;
  }
  capacity_tokens_ = num_tokens;
}

Status ApplyLoadOptions(const ModelLoadOptions& options, ModelConfig* config) {
  if (options.num_layers == 0) return OkStatus();
  if (options.num_layers < 0 || options.num_layers > config->num_layers) {
    return InvalidArgumentError("cannot keep the first " + std::to_string(options.num_layers) + " layers of a model with " +
                                std::to_string(config->num_layers));
  }
  config->num_layers = options.num_layers;
  return OkStatus();
}

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path, const ModelLoadOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFoundError("model path '" + path + "' does not exist");
  if (S_ISDIR(st.st_mode)) return LoadHuggingFaceModel(path, options);
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  if (ends_with(".bin")) return LoadLlama2cModel(path, options);
  return LoadGgufModel(path, options);
}

namespace {

// Replaces every quantized and F16/BF16 matrix by its 16-row interleaved copy
// (kernels/interleave.h), once per distinct tensor (a tied output shares the embedding's copy).
// The copies are independent, so they are made on all cores: a 1.1B model's ~155 matrices
// took ~1.5 s on one.
void InterleaveWeights(Model* model) {
  struct Job {
    TensorView source;
    AlignedBuffer copy;  // allocated (and its pages first touched) by the thread that fills it
    TensorView result;
  };
  std::map<const void*, size_t> index;  // source data -> job
  std::vector<Job> jobs;
  std::vector<TensorView*> targets;
  std::vector<size_t> target_job;
  auto plan = [&](TensorView& v) {
    if (!kernels::CanInterleave(v)) return;
    auto [it, fresh] = index.emplace(v.data, jobs.size());
    if (fresh) jobs.push_back({v, {}, {}});
    targets.push_back(&v);
    target_job.push_back(it->second);
  };
  ModelWeights& w = model->weights_;
  plan(w.token_embedding);
  plan(w.output);
  for (LayerWeights& l : w.layers) {
    for (TensorView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) plan(*v);
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
      Job& job = jobs[j];
      job.copy.Resize(kernels::InterleavedBytes(job.source));
      job.result = kernels::Interleave(job.source, job.copy.as<uint8_t>());
    }
  };
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(threads, jobs.size()); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < targets.size(); ++i) *targets[i] = jobs[target_job[i]].result;
  for (Job& job : jobs) {
    model->owned_.push_back(std::move(job.copy));
    // The source is not read again: its file pages need not stay resident (a model would
    // otherwise count twice in RSS, e.g. 4.3 GB for a 2.2 GB F16 file).
    for (const auto& file : model->files_) file->ReleasePages(job.source.data, static_cast<size_t>(job.source.num_bytes()));
  }
}

}  // namespace

void FinishModel(Model* model) {
  InterleaveWeights(model);
  const ModelConfig& c = model->config_;
  if (c.learned_positions) return;
  model->rope_inv_freq_.resize(c.rope_dim / 2);
  kernels::RopeInvFreq(c.rope_base, c.rope_dim,
                       c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data(),
                       c.rope_linear_scale, model->rope_inv_freq_.data());
}

std::string Model::Describe() const {
  std::ostringstream os;
  const ModelConfig& c = config_;
  os << ArchitectureName(c.arch) << ": " << c.num_layers << " layers, hidden " << c.hidden_size
     << ", heads " << c.num_heads << "/" << c.num_kv_heads << " x " << c.head_dim << ", ffn "
     << c.ffn_size << ", vocab " << c.vocab_size << ", context " << c.context_length
     << ", weights";
  // Every stored type of the matrices with its count (a llama-quantize mix has several).
  std::map<std::string, int> types;
  for (const LayerWeights& l : weights_.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) {
      if (!t->empty()) ++types[DTypeName(t->dtype)];
    }
  }
  ++types[DTypeName(weights_.output.dtype)];
  for (const auto& [name, count] : types) os << " " << name << " x" << count;
  return os.str();
}

int64_t Model::DecodeWeightBytes() const {
  int64_t bytes = weights_.output.num_bytes() + weights_.token_embedding.row_bytes();
  for (const auto& l : weights_.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) {
      if (!t->empty()) bytes += t->num_bytes();
    }
  }
  return bytes;
}

void Model::EmbeddingRow(int32_t id, float* out) const { kernels::DequantizeRow(weights_.token_embedding, id, out); }

Status Model::ValidatePlan(const BatchPlan& plan, const KvCacheView& kv) const {
  if (static_cast<int>(kv.layers.size()) != config_.num_layers) {
    return InvalidArgumentError("KV cache has " + std::to_string(kv.layers.size()) + " layers, model has " + std::to_string(config_.num_layers));
  }
  for (const kernels::KvLayerView& l : kv.layers) {
    if (l.head_dim != config_.head_dim || l.kv_dim != config_.kv_dim() || l.tokens_per_block < 1) {
      return InvalidArgumentError("KV cache layout (kv_dim " + std::to_string(l.kv_dim) + ", head_dim " + std::to_string(l.head_dim) +
                                  ") does not match the model (" + std::to_string(config_.kv_dim()) + ", " +
                                  std::to_string(config_.head_dim) + ")");
    }
  }
  for (const SequenceChunk& c : plan.chunks) {
    if (c.num_tokens <= 0) return InvalidArgumentError("a sequence chunk has no tokens");
    for (int32_t i = 0; i < c.num_tokens; ++i) {
      const int32_t id = c.token_ids[i];
      if (id < 0 || id >= config_.vocab_size + (c.prompt_table ? c.prompt_table_rows : 0)) {
        return InvalidArgumentError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(config_.vocab_size) +
                                    (c.prompt_table ? " and the prompt table of " + std::to_string(c.prompt_table_rows) + " rows" : std::string()));
      }
    }
    if (c.lora != nullptr && c.lora->num_layers() != config_.num_layers) {
      return InvalidArgumentError("a LoRA adapter for " + std::to_string(c.lora->num_layers()) + " layers cannot run on a model of " +
                                  std::to_string(config_.num_layers));
    }
    if (c.num_logits < 1 || c.num_logits > c.num_tokens) return InvalidArgumentError("a sequence chunk asks for logits of tokens it does not hold");
    if (c.start_pos < 0 || static_cast<int64_t>(c.start_pos) + c.num_tokens > config_.context_length) {
      return InvalidArgumentError("positions " + std::to_string(c.start_pos) + ".." + std::to_string(c.start_pos + c.num_tokens - 1) +
                                  " exceed the context length " + std::to_string(config_.context_length));
    }
    const int32_t tpb = kv.layers[0].tokens_per_block;
    const int64_t need = (static_cast<int64_t>(c.start_pos) + c.num_tokens + tpb - 1) / tpb;
    if (c.num_blocks < need) return InvalidArgumentError("block table too short for the chunk's positions");
    for (int64_t b = 0; b < need; ++b) {
      if (c.block_table[b] < 0 || c.block_table[b] >= kv.num_blocks) return InvalidArgumentError("block id out of range");
    }
  }
  return OkStatus();
}

namespace {

// x += y over [num_tokens, n]; a prompt's rows are split over the pool.
void AddResidual(float* x, const float* y, int64_t num_tokens, int64_t n, ThreadPool& pool) {
  if (num_tokens < 32) return kernels::AddInPlace(x, y, num_tokens * n);
  pool.ParallelFor(num_tokens, 8, [&](int64_t t0, int64_t t1) { kernels::AddInPlace(x + t0 * n, y + t0 * n, (t1 - t0) * n); });
}

}  // namespace

void Model::Norm(const std::vector<float>& w, const std::vector<float>& b, const float* x, float* out,
                 int64_t num_tokens, ThreadPool& pool) const {
  const int64_t n = config_.hidden_size;
  auto rows = [&](int64_t t0, int64_t t1) {
    if (config_.layer_norm) {
      kernels::LayerNorm(x + t0 * n, w.data(), b.empty() ? nullptr : b.data(), t1 - t0, n, config_.norm_eps, out + t0 * n);
    } else {
      kernels::RmsNorm(x + t0 * n, w.data(), t1 - t0, n, config_.norm_eps, out + t0 * n);
    }
  };
  if (num_tokens >= 32) pool.ParallelFor(num_tokens, 8, rows);
  else rows(0, num_tokens);
}

void Model::Attention(int layer, const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                      ThreadPool& pool, int64_t T) const {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[layer];
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  float* q = s.q;
  float* k = s.k;
  float* v = s.v;
  if (!lw.wqkv.empty()) {
    // Fused projection: [T, qd + 2 kvd], split into q (in place, compacted) / k / v.
    const int64_t fused = qd + 2 * kvd;
    kernels::MatMul(lw.wqkv, s.h, T, s.q, pool, s.matmul);
    if (!lw.bqkv.empty()) kernels::AddBias(s.q, lw.bqkv.data(), T, fused);
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(k + t * kvd, s.q + t * fused + qd, kvd * sizeof(float));
      std::memcpy(v + t * kvd, s.q + t * fused + qd + kvd, kvd * sizeof(float));
      std::memmove(q + t * qd, s.q + t * fused, qd * sizeof(float));
    }
  } else {
    const kernels::MatMulTarget qkv[] = {{&lw.wq, q}, {&lw.wk, k}, {&lw.wv, v}};
    kernels::MatMulGroup(qkv, 3, s.h, T, pool, s.matmul);
    if (!lw.bq.empty()) kernels::AddBias(q, lw.bq.data(), T, qd);
    if (!lw.bk.empty()) kernels::AddBias(k, lw.bk.data(), T, kvd);
    if (!lw.bv.empty()) kernels::AddBias(v, lw.bv.data(), T, kvd);
  }
  if (s.any_lora) {
    const int32_t H = c.hidden_size;
    const int32_t qd32 = static_cast<int32_t>(qd), kvd32 = static_cast<int32_t>(kvd);
    ApplyLora(layer, kLoraAttnQ, s.h, H, q, qd, 0, qd32, s, pool, T);
    ApplyLora(layer, kLoraAttnK, s.h, H, k, kvd, 0, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnV, s.h, H, v, kvd, 0, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, q, qd, 0, qd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, k, kvd, qd32, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, v, kvd, qd32 + kvd32, kvd32, s, pool, T);
  }
  if (!lw.q_norm.empty()) {
    kernels::RmsNorm(q, lw.q_norm.data(), T * c.num_heads, c.head_dim, c.norm_eps, q);
    kernels::RmsNorm(k, lw.k_norm.data(), T * c.num_kv_heads, c.head_dim, c.norm_eps, k);
  }
  std::vector<kernels::AttentionSeq> seqs;
  seqs.reserve(plan.chunks.size());
  int64_t row = 0;
  for (const SequenceChunk& ch : plan.chunks) {
    seqs.push_back({ch.block_table, ch.start_pos, ch.num_tokens, row});
    row += ch.num_tokens;
  }
  // RoPE and the K/V store, sequence by sequence on the pool (each writes its own slots).
  pool.ParallelFor(static_cast<int64_t>(seqs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t si = begin; si < end; ++si) {
      const kernels::AttentionSeq& seq = seqs[si];
      if (!c.learned_positions) {
        for (int64_t row = seq.row_offset; row < seq.row_offset + seq.num_tokens; ++row) {
          const float* cos = s.rope_angles + row * c.rope_dim;
          const float* sin = cos + c.rope_dim / 2;
          kernels::ApplyRopeAngles(q + row * qd, c.num_heads, c.head_dim, c.rope_dim, c.rope_style, cos, sin);
          kernels::ApplyRopeAngles(k + row * kvd, c.num_kv_heads, c.head_dim, c.rope_dim, c.rope_style, cos, sin);
        }
      }
      kernels::WriteKv(kv.layers[layer], seq, k + seq.row_offset * kvd, v + seq.row_offset * kvd);
    }
  });
  const kernels::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  kernels::PagedAttention(kv.layers[layer], shape, seqs.data(), static_cast<int>(seqs.size()), q,
                          s.attn, pool, s.attention);
  kernels::MatMul(lw.wo, s.attn, T, s.out, pool, s.matmul);
  if (!lw.bo.empty()) kernels::AddBias(s.out, lw.bo.data(), T, c.hidden_size);
  ApplyLora(layer, kLoraAttnDense, s.attn, qd, s.out, c.hidden_size, 0, c.hidden_size, s, pool, T);
  AddResidual(s.x, s.out, T, c.hidden_size, pool);
}

void Model::ApplyLora(int layer, int32_t module, const float* x, int64_t x_stride, float* y, int64_t y_stride,
                      int32_t b_row0, int32_t b_rows, const ForwardScratch& s, ThreadPool& pool, int64_t T) const {
  if (!s.any_lora) return;
  pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> ax;
    for (int64_t t = t0; t < t1; ++t) {
      const LoraAdapter* adapter = s.row_lora[t];
      const LoraMatrix* m = adapter ? adapter->Get(layer, module) : nullptr;
      if (m == nullptr) continue;
      ax.resize(m->rank);
      const float* xr = x + t * x_stride;
      for (int32_t r = 0; r < m->rank; ++r) {
        const float* ar = m->a.data() + static_cast<int64_t>(r) * m->in;
        float acc = 0;
        for (int32_t i = 0; i < m->in; ++i) acc += ar[i] * xr[i];
        ax[r] = acc;
      }
      float* yr = y + t * y_stride;
      for (int32_t j = 0; j < b_rows; ++j) {
        const float* br = m->b.data() + static_cast<int64_t>(b_row0 + j) * m->rank;
        float acc = 0;
        for (int32_t r = 0; r < m->rank; ++r) acc += br[r] * ax[r];
        yr[j] += acc;
      }
    }
  });
}

void Model::FeedForward(int layer, ForwardScratch& s, ThreadPool& pool, int64_t T) const {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[layer];
  const int32_t H = c.hidden_size, F = c.ffn_size;
  if (c.gelu_ffn) {
    kernels::MatMul(lw.w_up, s.h, T, s.up, pool, s.matmul);
    if (!lw.b_up.empty()) kernels::AddBias(s.up, lw.b_up.data(), T, c.ffn_size);
    ApplyLora(layer, kLoraMlpHTo4h, s.h, H, s.up, F, 0, F, s, pool, T);
    pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) { kernels::GeluTanh(s.up + t0 * c.ffn_size, (t1 - t0) * c.ffn_size); });
    kernels::MatMul(lw.w_down, s.up, T, s.out, pool, s.matmul);
    ApplyLora(layer, kLoraMlp4hToH, s.up, F, s.out, H, 0, H, s, pool, T);
  } else {
    const kernels::MatMulTarget gate_up[] = {{&lw.w_gate, s.gate}, {&lw.w_up, s.up}};
    kernels::MatMulGroup(gate_up, 2, s.h, T, pool, s.matmul);
    ApplyLora(layer, kLoraMlpHTo4h, s.h, H, s.gate, F, 0, F, s, pool, T);
    ApplyLora(layer, kLoraMlpGate, s.h, H, s.up, F, 0, F, s, pool, T);
    pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      kernels::SiluMul(s.gate + t0 * c.ffn_size, s.up + t0 * c.ffn_size, (t1 - t0) * c.ffn_size);
    });
    kernels::MatMul(lw.w_down, s.gate, T, s.out, pool, s.matmul);
    ApplyLora(layer, kLoraMlp4hToH, s.gate, F, s.out, H, 0, H, s, pool, T);
  }
  if (!lw.b_down.empty()) kernels::AddBias(s.out, lw.b_down.data(), T, c.hidden_size);
  AddResidual(s.x, s.out, T, c.hidden_size, pool);
}

Status Model::Forward(const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                      ThreadPool& pool, float* logits) const {
  RETURN_IF_ERROR(ValidatePlan(plan, kv));
  const ModelConfig& c = config_;
  const int64_t T = plan.num_tokens();
  if (T == 0) return OkStatus();
  s.Reserve(c, T, kv.layers.empty() ? 1 : kv.layers[0].tokens_per_block, pool.num_threads());

  s.any_lora = false;
  s.row_lora.assign(static_cast<size_t>(T), nullptr);
  {
    int64_t r = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i) s.row_lora[r++] = ch.lora;
      s.any_lora = s.any_lora || ch.lora != nullptr;
    }
  }
  // Embeddings (+ learned positions).
  int64_t row = 0;
  std::vector<float> pos_row(c.learned_positions ? c.hidden_size : 0);
  for (const SequenceChunk& ch : plan.chunks) {
    for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
      float* xr = s.x + row * c.hidden_size;
      const int32_t id = ch.token_ids[i];
      if (id >= c.vocab_size) {
        std::memcpy(xr, ch.prompt_table + static_cast<int64_t>(id - c.vocab_size) * c.hidden_size, c.hidden_size * sizeof(float));
      } else {
        kernels::DequantizeRow(weights_.token_embedding, id, xr);
      }
      if (c.learned_positions) {
        kernels::DequantizeRow(weights_.position_embedding, ch.start_pos + i, pos_row.data());
        kernels::AddInPlace(xr, pos_row.data(), c.hidden_size);
      }
    }
  }
  // RoPE angles of every token, once for all layers.
  if (!c.learned_positions) {
    row = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
        float* cos = s.rope_angles + row * c.rope_dim;
        kernels::RopeAngles(rope_inv_freq_.data(), c.rope_dim, ch.start_pos + i, cos, cos + c.rope_dim / 2);
      }
    }
  }
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerWeights& lw = weights_.layers[layer];
    Norm(lw.attn_norm, lw.attn_norm_bias, s.x, s.h, T, pool);
    Attention(layer, plan, kv, s, pool, T);
    Norm(lw.ffn_norm, lw.ffn_norm_bias, s.x, s.h, T, pool);
    FeedForward(layer, s, pool, T);
  }
  // Gather the rows that need logits, normalise, project.
  int64_t out_rows = 0;
  row = 0;
  for (const SequenceChunk& ch : plan.chunks) {
    const int32_t first = ch.num_tokens - ch.num_logits;
    for (int32_t i = first; i < ch.num_tokens; ++i) {
      std::memmove(s.h + out_rows * c.hidden_size, s.x + (row + i) * c.hidden_size, c.hidden_size * sizeof(float));
      ++out_rows;
    }
    row += ch.num_tokens;
  }
  Norm(weights_.output_norm, weights_.output_norm_bias, s.h, s.h, out_rows, pool);
  kernels::MatMul(weights_.output, s.h, out_rows, logits, pool, s.matmul);
  return OkStatus();
}

}  // namespace inflight
