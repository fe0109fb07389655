#include "model/model.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "base/thread_pool.h"
#include "kernels/interleave.h"
#include "kernels/ops.h"
#include "model/families.h"

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

void ForwardScratch::Reserve(const ModelConfig& c, int32_t heads, int32_t kv_heads,
                             int64_t num_tokens, int32_t tokens_per_block, int num_threads) {
  if (tokens_per_block > capacity_block_ || num_threads > capacity_threads_) {
    tokens_per_block = std::max(tokens_per_block, capacity_block_);
    num_threads = std::max(num_threads, capacity_threads_);
    attention_.Resize(kernels::AttentionScratchFloats({heads, kv_heads, c.head_dim, 1.0f},
                                                      num_threads, tokens_per_block) *
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
                           num_tokens * c.rope_dim * 2};
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
    return InvalidArgumentError("cannot keep the first " + std::to_string(options.num_layers) +
                                " layers of a model with " + std::to_string(config->num_layers));
  }
  config->num_layers = options.num_layers;
  return OkStatus();
}

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path,
                                             const ModelLoadOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFoundError("model path '" + path + "' does not exist");
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
void InterleaveWeights(Model* model, bool exact_f16) {
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
    if (v.empty() || !kernels::CanInterleave(v)) return;
    if (exact_f16 && (v.dtype == DType::kF16 || v.dtype == DType::kBF16)) return;
    auto [it, fresh] = index.emplace(v.data, jobs.size());
    if (fresh) jobs.push_back({v, {}, {}});
    targets.push_back(&v);
    target_job.push_back(it->second);
  };
  ModelWeights& w = model->weights_;
  plan(w.token_embedding);
  plan(w.output);
  for (LayerWeights& l : w.layers) {
    for (TensorView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down,
                          &l.router, &l.shared_gate, &l.shared_up, &l.shared_down})
      plan(*v);
    for (auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (TensorView& v : *experts) plan(v);
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
    for (const auto& file : model->files_)
      file->ReleasePages(job.source.data, static_cast<size_t>(job.source.num_bytes()));
  }
}

}  // namespace

Status CutToShard(const ModelShard& shard, Model* model);  // model_shard.cc

namespace {

// An expert-parallel shard holds some experts only: the others' views are empty.
const TensorView* FirstHeldExpert(const std::vector<TensorView>& experts) {
  for (const TensorView& v : experts)
    if (!v.empty()) return &v;
  return nullptr;
}

}  // namespace

Status FinishModel(Model* model, const ModelLoadOptions& options) {
  RETURN_IF_ERROR(CutToShard(options.shard, model));
  InterleaveWeights(model, options.exact_f16);
  const ModelConfig& c = model->config_;
  if (model->family_ == nullptr) model->family_ = &FamilyFor(c.arch);
  model->rope_tables_.clear();
  if (c.learned_positions) return OkStatus();
  Model::RopeTable global;
  global.inv_freq.resize(c.rope_dim / 2);
  kernels::RopeInvFreq(c.rope_base, c.rope_dim,
                       c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data(),
                       c.rope_linear_scale, global.inv_freq.data());
  global.attn_factor = c.rope_attn_factor;
  if (c.rope_yarn_factor > 0) {
    // YaRN as ggml computes it: dimension pairs rotating fewer than beta_slow times over the
    // original context are interpolated (frequency / factor), those rotating more than
    // beta_fast times kept, a linear ramp between; cos and sin grow by 1 + 0.1 ln(factor).
    const double n = c.rope_dim, orig = c.rope_original_context, base = c.rope_base;
    auto corr_dim = [&](double rotations) {
      return n * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    const double low = std::max(0.0, std::floor(corr_dim(c.rope_yarn_beta_fast)));
    const double high = std::min(n - 1, std::ceil(corr_dim(c.rope_yarn_beta_slow)));
    const double freq_scale = 1.0 / c.rope_yarn_factor;
    for (int i = 0; i < c.rope_dim / 2; ++i) {
      const double y = (i - low) / std::max(0.001, high - low);
      const double extrapolate = 1 - std::min(1.0, std::max(0.0, y));
      const double extrap = std::pow(base, -2.0 * i / n);
      global.inv_freq[i] =
          static_cast<float>(extrap * (freq_scale * (1 - extrapolate) + extrapolate));
    }
    global.attn_factor *= static_cast<float>(1 + 0.1 * std::log(c.rope_yarn_factor));
  }
  model->rope_tables_.push_back(std::move(global));
  if (c.rope_window_base > 0) {
    Model::RopeTable local;
    local.inv_freq.resize(c.rope_dim / 2);
    kernels::RopeInvFreq(c.rope_window_base, c.rope_dim, nullptr, 1.0f, local.inv_freq.data());
    model->rope_tables_.push_back(std::move(local));
  }
  return OkStatus();
}

int Model::RopeTableOf(int layer) const {
  return rope_tables_.size() > 1 && config_.is_window_layer(layer) ? 1 : 0;
}

std::string Model::Describe() const {
  std::ostringstream os;
  const ModelConfig& c = config_;
  os << ArchitectureName(c.arch) << ": " << c.num_layers << " layers, hidden " << c.hidden_size
     << ", heads " << c.num_heads << "/" << c.num_kv_heads << " x " << c.head_dim << ", ffn "
     << c.ffn_size << ", vocab " << c.vocab_size << ", context " << c.context_length;
  if (c.num_experts > 0) {
    os << ", experts " << c.experts_per_token << " of " << c.num_experts << " x "
       << c.expert_ffn_size;
  }
  if (c.sliding_window > 0) os << ", sliding window " << c.sliding_window;
  os << ", weights";
  // Every stored type of the matrices with its count (a llama-quantize mix has several).
  std::map<std::string, int> types;
  for (const LayerWeights& l : weights_.layers) {
    for (const TensorView* t :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) {
      if (!t->empty()) ++types[DTypeName(t->dtype)];
    }
    // An expert tensor counts once, as the file stores it.
    for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
      const TensorView* held = FirstHeldExpert(*experts);
      if (held != nullptr) ++types[DTypeName(held->dtype)];
    }
  }
  ++types[DTypeName(weights_.output.dtype)];
  for (const auto& [name, count] : types) os << " " << name << " x" << count;
  return os.str();
}

int64_t Model::DecodeWeightBytes() const {
  int64_t bytes = weights_.output.num_bytes() + weights_.token_embedding.row_bytes();
  for (const auto& l : weights_.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down,
                                &l.router, &l.shared_gate, &l.shared_up, &l.shared_down}) {
      if (!t->empty()) bytes += t->num_bytes();
    }
    // A decode step of one token reads only its experts_per_token experts.
    for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down}) {
      const TensorView* held = FirstHeldExpert(*experts);
      if (held != nullptr) bytes += held->num_bytes() * config_.experts_per_token;
    }
  }
  return bytes;
}

void Model::EmbeddingRow(int32_t id, float* out) const {
  kernels::DequantizeRow(weights_.token_embedding, id, out);
}

namespace {

// x += y over [num_tokens, n]; a prompt's rows are split over the pool.
void AddResidual(float* x, const float* y, int64_t num_tokens, int64_t n, ThreadPool& pool) {
  if (num_tokens < 32) return kernels::AddInPlace(x, y, num_tokens * n);
  pool.ParallelFor(num_tokens, 8, [&](int64_t t0, int64_t t1) {
    kernels::AddInPlace(x + t0 * n, y + t0 * n, (t1 - t0) * n);
  });
}

float* Grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n))
    v.resize(std::max<size_t>(static_cast<size_t>(n), 2 * v.size()));
  return v.data();
}

}  // namespace

Status Model::GatherColumns(TensorParallelGroup* tp, const float* local, int64_t T,
                            const std::vector<int64_t>& sizes, float* out, ForwardScratch& s,
                            bool only_first) const {
  const int64_t ranks = static_cast<int64_t>(sizes.size());
  const int64_t widest = *std::max_element(sizes.begin(), sizes.end());
  const int64_t mine = sizes[tp->rank()];
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  // [send: T x widest][recv: ranks x T x widest]; a narrower rank pads its rows.
  float* send = Grow(s.tp_exchange, (ranks + 1) * T * widest);
  float* recv = send + T * widest;
  if (mine == widest) {
    send = const_cast<float*>(local);
  } else {
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(send + t * widest, local + t * mine, mine * sizeof(float));
  }
  RETURN_IF_ERROR(only_first ? tp->Gather(send, T * widest, recv)
                             : tp->AllGather(send, T * widest, recv));
  if (only_first && tp->rank() != 0) return OkStatus();
  int64_t offset = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(out + t * total + offset, recv + (r * T + t) * widest, sizes[r] * sizeof(float));
    }
    offset += sizes[r];
  }
  return OkStatus();
}

void Model::Norm(const std::vector<float>& w, const std::vector<float>& b, const float* x,
                 float* out, int64_t num_tokens, ThreadPool& pool) const {
  const int64_t n = config_.hidden_size;
  auto rows = [&](int64_t t0, int64_t t1) {
    if (config_.layer_norm) {
      kernels::LayerNorm(x + t0 * n, w.data(), b.empty() ? nullptr : b.data(), t1 - t0, n,
                         config_.norm_eps, out + t0 * n);
    } else {
      kernels::RmsNorm(x + t0 * n, w.data(), t1 - t0, n, config_.norm_eps, out + t0 * n);
    }
  };
  if (num_tokens >= 32)
    pool.ParallelFor(num_tokens, 8, rows);
  else
    rows(0, num_tokens);
}

Status Model::Attention(int layer, const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                        ThreadPool& pool, int64_t T, TensorParallelGroup* tp) const {
  const ModelConfig& c = config_;
  const ShardLayout& sh = shard_;
  const int local = layer - sh.layer_begin;
  const LayerWeights& lw = weights_.layers[local];
  // This rank's heads (all of them without tensor parallelism).
  const int64_t qd = static_cast<int64_t>(sh.num_heads) * c.head_dim,
                kvd = static_cast<int64_t>(sh.num_kv_heads) * c.head_dim;
  const int32_t H = c.hidden_size, lh = static_cast<int32_t>(sh.hidden.size());
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
    // An adapter's B rows for this rank's heads: offsets into the full q / k / v (or fused) rows.
    const int32_t qd32 = static_cast<int32_t>(qd), kvd32 = static_cast<int32_t>(kvd);
    const int32_t q0 = sh.head_begin * c.head_dim, kv0 = sh.kv_head_begin * c.head_dim;
    ApplyLora(layer, kLoraAttnQ, s.h, H, q, qd, q0, qd32, s, pool, T);
    ApplyLora(layer, kLoraAttnK, s.h, H, k, kvd, kv0, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnV, s.h, H, v, kvd, kv0, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, q, qd, q0, qd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, k, kvd, c.q_dim() + kv0, kvd32, s, pool, T);
    ApplyLora(layer, kLoraAttnQkv, s.h, H, v, kvd, c.q_dim() + c.kv_dim() + kv0, kvd32, s, pool, T);
  }
  if (!lw.q_norm.empty()) {
    kernels::RmsNorm(q, lw.q_norm.data(), T * sh.num_heads, c.head_dim, c.norm_eps, q);
    kernels::RmsNorm(k, lw.k_norm.data(), T * sh.num_kv_heads, c.head_dim, c.norm_eps, k);
  }
  std::vector<kernels::AttentionSeq> seqs;
  seqs.reserve(plan.chunks.size());
  const bool window_group =
      !kv.layer_group.empty() && kv.layer_group[static_cast<size_t>(local)] != 0;
  int64_t row = 0;
  for (const SequenceChunk& ch : plan.chunks) {
    seqs.push_back({window_group ? ch.window_block_table : ch.block_table, ch.start_pos,
                    ch.num_tokens, row, ch.tree, ch.tree_scratch});
    row += ch.num_tokens;
  }
  const kernels::KvLayerView& kv_layer = kv.layers[local];
  const float* rope_angles = s.rope_angles + RopeTableOf(layer) * T * c.rope_dim;
  // RoPE and the K/V store, sequence by sequence on the pool (each writes its own slots).
  pool.ParallelFor(static_cast<int64_t>(seqs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t si = begin; si < end; ++si) {
      const kernels::AttentionSeq& seq = seqs[si];
      if (!c.learned_positions) {
        for (int64_t row = seq.row_offset; row < seq.row_offset + seq.num_tokens; ++row) {
          const float* cos = rope_angles + row * c.rope_dim;
          const float* sin = cos + c.rope_dim / 2;
          kernels::ApplyRopeAngles(q + row * qd, sh.num_heads, c.head_dim, c.rope_dim, c.rope_style,
                                   cos, sin);
          kernels::ApplyRopeAngles(k + row * kvd, sh.num_kv_heads, c.head_dim, c.rope_dim,
                                   c.rope_style, cos, sin);
        }
      }
      kernels::WriteKv(kv_layer, seq, k + seq.row_offset * kvd, v + seq.row_offset * kvd);
    }
  });
  kernels::AttentionShape shape{
      sh.num_heads, sh.num_kv_heads, c.head_dim,
      c.attention_scale > 0 ? c.attention_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  shape.softcap = c.attn_logit_softcap;
  shape.window = c.is_window_layer(layer) ? c.sliding_window : 0;
  shape.sinks = lw.attn_sinks.empty() ? nullptr : lw.attn_sinks.data();
  kernels::PagedAttention(kv_layer, shape, seqs.data(), static_cast<int>(seqs.size()), q, s.attn,
                          pool, s.attention);
  // The output projection reads every head: gather them first under tensor parallelism.
  const float* attn = s.attn;
  if (tp != nullptr) {
    float* all_heads = Grow(s.tp_wide, T * std::max<int64_t>(c.q_dim(), c.ffn_size));
    RETURN_IF_ERROR(
        GatherColumns(tp, s.attn, T, std::vector<int64_t>(sh.tp_size(), qd), all_heads, s));
    attn = all_heads;
  }
  kernels::MatMul(lw.wo, attn, T, s.out, pool, s.matmul);
  if (!lw.bo.empty()) kernels::AddBias(s.out, lw.bo.data(), T, lh);
  ApplyLora(layer, kLoraAttnDense, attn, c.q_dim(), s.out, lh,
            static_cast<int32_t>(sh.hidden.begin), lh, s, pool, T);
  return OkStatus();
}

Status Model::AddOutputToResidual(ForwardScratch& s, ThreadPool& pool, int64_t T,
                                  TensorParallelGroup* tp,
                                  const std::vector<float>* post_norm) const {
  const int64_t H = config_.hidden_size;
  float* out = s.out;
  if (tp != nullptr) {
    float* full = Grow(s.tp_full, T * H);
    RETURN_IF_ERROR(GatherColumns(tp, s.out, T, shard_.hidden_sizes, full, s));
    out = full;
  }
  // A post-norm needs whole rows: under TP it runs after the gather, on every rank alike.
  if (post_norm != nullptr && !post_norm->empty()) Norm(*post_norm, {}, out, out, T, pool);
  AddResidual(s.x, out, T, H, pool);
  return OkStatus();
}

void Model::ApplyLora(int layer, int32_t module, const float* x, int64_t x_stride, float* y,
                      int64_t y_stride, int32_t b_row0, int32_t b_rows, const ForwardScratch& s,
                      ThreadPool& pool, int64_t T) const {
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

Status Model::FeedForward(int layer, ForwardScratch& s, ThreadPool& pool, int64_t T,
                          TensorParallelGroup* tp) const {
  const ModelConfig& c = config_;
  const ShardLayout& sh = shard_;
  const LayerWeights& lw = weights_.layers[layer - sh.layer_begin];
  if (lw.has_experts()) return MixtureOfExperts(layer, s, pool, T, tp);
  // This rank's FFN columns and output rows (all of them without tensor parallelism).
  const int32_t H = c.hidden_size, F = c.ffn_size;
  const int32_t lf = static_cast<int32_t>(sh.ffn.size()),
                lh = static_cast<int32_t>(sh.hidden.size());
  const int32_t f0 = static_cast<int32_t>(sh.ffn.begin), h0 = static_cast<int32_t>(sh.hidden.begin);
  float* act = c.gelu_ffn ? s.up : s.gate;  // [T, lf]: the down projection's input
  if (c.gelu_ffn) {
    kernels::MatMul(lw.w_up, s.h, T, s.up, pool, s.matmul);
    if (!lw.b_up.empty()) kernels::AddBias(s.up, lw.b_up.data(), T, lf);
    ApplyLora(layer, kLoraMlpHTo4h, s.h, H, s.up, lf, f0, lf, s, pool, T);
    pool.ParallelFor(
        T, 1, [&](int64_t t0, int64_t t1) { kernels::GeluTanh(s.up + t0 * lf, (t1 - t0) * lf); });
  } else {
    const kernels::MatMulTarget gate_up[] = {{&lw.w_gate, s.gate}, {&lw.w_up, s.up}};
    kernels::MatMulGroup(gate_up, 2, s.h, T, pool, s.matmul);
    ApplyLora(layer, kLoraMlpHTo4h, s.h, H, s.gate, lf, f0, lf, s, pool, T);
    ApplyLora(layer, kLoraMlpGate, s.h, H, s.up, lf, f0, lf, s, pool, T);
    pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      kernels::GatedActivation(c.ffn_activation, s.gate + t0 * lf, s.up + t0 * lf, (t1 - t0) * lf);
    });
  }
  const float* down_in = act;
  if (tp != nullptr) {
    float* all_columns = Grow(s.tp_wide, T * std::max<int64_t>(c.q_dim(), F));
    RETURN_IF_ERROR(GatherColumns(tp, act, T, sh.ffn_sizes, all_columns, s));
    down_in = all_columns;
  }
  kernels::MatMul(lw.w_down, down_in, T, s.out, pool, s.matmul);
  ApplyLora(layer, kLoraMlp4hToH, down_in, F, s.out, lh, h0, lh, s, pool, T);
  if (!lw.b_down.empty()) kernels::AddBias(s.out, lw.b_down.data(), T, lh);
  return OkStatus();
}

Status Model::Embed(const BatchPlan& plan, ForwardScratch& s, int64_t T,
                    TensorParallelGroup* tp) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  // Under tensor parallelism a token's row lives on the rank owning its vocabulary range: each
  // rank looks up its own, then all take each row from its owner (a copy, not a sum).
  s.tp_owner.assign(static_cast<size_t>(T), -1);
  int64_t row = 0;
  std::vector<float> pos_row(c.learned_positions ? c.hidden_size : 0);
  for (const SequenceChunk& ch : plan.chunks) {
    for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
      float* xr = s.x + row * H;
      const int32_t id = ch.token_ids[i];
      if (id >= c.vocab_size) {
        std::memcpy(xr, ch.prompt_table + static_cast<int64_t>(id - c.vocab_size) * H,
                    H * sizeof(float));
      } else if (id >= shard_.vocab.begin && id < shard_.vocab.end) {
        kernels::DequantizeRow(weights_.token_embedding, id - shard_.vocab.begin, xr);
      } else {
        int32_t owner = 0;
        for (int64_t end = shard_.vocab_sizes[0]; id >= end; end += shard_.vocab_sizes[++owner]) {
        }
        s.tp_owner[row] = owner;
      }
    }
  }
  if (tp != nullptr) {
    float* all = Grow(s.tp_exchange, tp->size() * T * H);
    RETURN_IF_ERROR(tp->AllGather(s.x, T * H, all));
    for (int64_t t = 0; t < T; ++t) {
      if (s.tp_owner[t] >= 0)
        std::memcpy(s.x + t * H, all + (s.tp_owner[t] * T + t) * H, H * sizeof(float));
    }
  }
  if (c.embedding_scale != 1.0f) {
    // Gemma scales token embeddings (not p-tuning rows, which are already in model space).
    row = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
        if (ch.token_ids[i] >= c.vocab_size) continue;
        float* xr = s.x + row * H;
        for (int64_t j = 0; j < H; ++j) xr[j] *= c.embedding_scale;
      }
    }
  }
  if (c.learned_positions) {
    row = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
        kernels::DequantizeRow(weights_.position_embedding, ch.PositionOf(i), pos_row.data());
        kernels::AddInPlace(s.x + row * H, pos_row.data(), H);
      }
    }
  }
  return OkStatus();
}

Status Model::Logits(const BatchPlan& plan, ForwardScratch& s, ThreadPool& pool,
                     TensorParallelGroup* tp, float* logits) const {
  const ModelConfig& c = config_;
  // Gather the rows that need logits, normalise, project.
  int64_t out_rows = 0, row = 0;
  for (const SequenceChunk& ch : plan.chunks) {
    const int32_t first = ch.num_tokens - ch.num_logits;
    for (int32_t i = first; i < ch.num_tokens; ++i) {
      std::memmove(s.h + out_rows * c.hidden_size, s.x + (row + i) * c.hidden_size,
                   c.hidden_size * sizeof(float));
      ++out_rows;
    }
    row += ch.num_tokens;
  }
  Norm(weights_.output_norm, weights_.output_norm_bias, s.h, s.h, out_rows, pool);
  // Gemma 2: logits = cap * tanh(logits / cap).
  auto soft_cap = [&](float* rows, int64_t n) {
    const float cap = c.final_logit_softcap;
    if (cap <= 0) return;
    pool.ParallelFor(n, 1024, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) rows[i] = cap * std::tanh(rows[i] / cap);
    });
  };
  if (tp == nullptr) {
    kernels::MatMul(weights_.output, s.h, out_rows, logits, pool, s.matmul);
    soft_cap(logits, out_rows * c.vocab_size);
    return OkStatus();
  }
  // Each rank projects onto its vocabulary rows; TP rank 0 assembles whole rows.
  float* local = Grow(s.tp_logits, out_rows * shard_.vocab.size());
  kernels::MatMul(weights_.output, s.h, out_rows, local, pool, s.matmul);
  soft_cap(local, out_rows * shard_.vocab.size());
  return GatherColumns(tp, local, out_rows, shard_.vocab_sizes, logits, s, /*only_first=*/true);
}

Status Model::Forward(const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                      ThreadPool& pool, float* logits) const {
  ShardIo io;
  io.logits = logits;
  return ForwardShard(plan, kv, s, pool, io);
}

Status Model::ForwardShard(const BatchPlan& plan, const KvCacheView& kv, ForwardScratch& s,
                           ThreadPool& pool, const ShardIo& io) const {
  RETURN_IF_ERROR(ValidatePlan(plan, kv));
  const ModelConfig& c = config_;
  const ShardLayout& sh = shard_;
  TensorParallelGroup* tp = sh.tp_size() > 1 ? io.tp : nullptr;
  if (sh.tp_size() > 1 &&
      (tp == nullptr || tp->size() != sh.tp_size() || tp->rank() != sh.shard.tp_rank)) {
    return FailedPreconditionError("a tensor-parallel shard runs only in its own group of " +
                                   std::to_string(sh.tp_size()) + " ranks");
  }
  const bool last = sh.last_stage(c.num_layers);
  if ((!sh.first_stage() && io.hidden_in == nullptr) || (!last && io.hidden_out == nullptr)) {
    return FailedPreconditionError(
        "a pipeline stage needs the hidden states of the stage before it and a place for its own");
  }
  const int64_t T = plan.num_tokens();
  if (T == 0) return OkStatus();
  s.Reserve(c, sh.num_heads, sh.num_kv_heads, T,
            kv.layers.empty() ? 1 : kv.layers[0].tokens_per_block, pool.num_threads());

  s.any_lora = false;
  s.row_lora.assign(static_cast<size_t>(T), nullptr);
  {
    int64_t r = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i) s.row_lora[r++] = ch.lora;
      s.any_lora = s.any_lora || ch.lora != nullptr;
    }
  }
  if (io.hidden_in != nullptr) {
    std::memcpy(s.x, io.hidden_in, T * c.hidden_size * sizeof(float));
  } else {
    RETURN_IF_ERROR(Embed(plan, s, T, tp));
  }
  // RoPE angles of every token, once per table for all layers.
  for (size_t table = 0; table < rope_tables_.size(); ++table) {
    const RopeTable& rope = rope_tables_[table];
    int64_t row = 0;
    for (const SequenceChunk& ch : plan.chunks) {
      for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
        float* cos = s.rope_angles + (table * T + row) * c.rope_dim;
        kernels::RopeAngles(rope.inv_freq.data(), c.rope_dim, ch.PositionOf(i), cos,
                            cos + c.rope_dim / 2);
        if (rope.attn_factor != 1.0f) {
          for (int32_t j = 0; j < c.rope_dim; ++j) cos[j] *= rope.attn_factor;
        }
      }
    }
  }
  LayerPass pass;
  pass.model_ = this;
  pass.plan_ = &plan;
  pass.kv_ = &kv;
  pass.scratch_ = &s;
  pass.pool_ = &pool;
  pass.num_tokens_ = T;
  pass.tp_ = tp;
  for (int layer = sh.layer_begin; layer < sh.layer_end; ++layer) {
    pass.layer_ = layer;
    pass.weights_ = &weights_.layers[layer - sh.layer_begin];
    if (io.aux_out != nullptr) {
      const int64_t n = static_cast<int64_t>(io.aux_layers->size()), H = c.hidden_size;
      for (int64_t a = 0; a < n; ++a) {
        if ((*io.aux_layers)[a] != layer) continue;
        for (int64_t t = 0; t < T; ++t)
          std::memcpy(io.aux_out + (t * n + a) * H, s.x + t * H, H * sizeof(float));
      }
    }
    RETURN_IF_ERROR(family_->RunLayer(pass));
  }
  // Id num_layers: the last layer's output through the final norm (what the output projection
  // reads, and Hugging Face's last hidden state; an EAGLE-1/2 head's features).
  if (io.aux_out != nullptr && last) {
    const int64_t n = static_cast<int64_t>(io.aux_layers->size()), H = c.hidden_size;
    for (int64_t a = 0; a < n; ++a) {
      if ((*io.aux_layers)[a] != c.num_layers) continue;
      if (n == 1) {  // the rows are contiguous: one call (threaded for many rows)
        Norm(weights_.output_norm, weights_.output_norm_bias, s.x, io.aux_out, T, pool);
        continue;
      }
      for (int64_t t = 0; t < T; ++t)
        Norm(weights_.output_norm, weights_.output_norm_bias, s.x + t * H,
             io.aux_out + (t * n + a) * H, 1, pool);
    }
  }
  if (!last) {
    std::memcpy(io.hidden_out, s.x, T * c.hidden_size * sizeof(float));
    return OkStatus();
  }
  return Logits(plan, s, pool, tp, io.logits);
}

}  // namespace inflight

namespace inflight {

const ModelConfig& LayerPass::config() const { return model_->config_; }

void LayerPass::NormInput(const std::vector<float>& weight, const std::vector<float>& bias) {
  model_->Norm(weight, bias, scratch_->x, scratch_->h, num_tokens_, *pool_);
}

Status LayerPass::Attention() {
  return model_->Attention(layer_, *plan_, *kv_, *scratch_, *pool_, num_tokens_, tp_);
}

Status LayerPass::FeedForward() {
  return model_->FeedForward(layer_, *scratch_, *pool_, num_tokens_, tp_);
}

Status LayerPass::AddToResidual(const std::vector<float>* post_norm) {
  return model_->AddOutputToResidual(*scratch_, *pool_, num_tokens_, tp_, post_norm);
}

}  // namespace inflight
