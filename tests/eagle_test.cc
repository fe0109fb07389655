// EAGLE-3 and EAGLE-1/2 heads (model/eagle.h) and EAGLE decoding in the executor: the head's
// layer equals a
// naive reference (committed rows, then tree rows over their ancestors) and a row's result
// never depends on the rows beside it; a head that does not match its model is refused with
// the field named; greedy output with EAGLE trees is exactly the output without, for requests
// in flight beside beams; sampling keeps its distribution.
#include "model/eagle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "base/thread_pool.h"
#include "chi_square.h"
#include "eagle_writer.h"
#include "engine/executor.h"
#include "engine/model_runner.h"
#include "engine_test_util.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/head_weights.h"
#include "model/medusa.h"
#include "model/random_model.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using testing::EagleHeadSpec;

class EagleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(testing::WriteTinyModel("inflight_eagle_test"));
    auto m = Model::Load(*path_);
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(1);
    dir_ = new std::string(fs::temp_directory_path() /
                           ("inflight_eagle_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    fs::remove(*path_);
    delete model_;
    delete pool_;
    delete path_;
    delete dir_;
  }
  static EagleHeadSpec Spec(const Model& m) {
    EagleHeadSpec s;
    s.hidden = s.target_hidden = m.config().hidden_size;
    s.vocab = m.config().vocab_size;
    return s;
  }
  static Model* model_;
  static ThreadPool* pool_;
  static std::string *path_, *dir_;
};
Model* EagleTest::model_ = nullptr;
ThreadPool* EagleTest::pool_ = nullptr;
std::string* EagleTest::path_ = nullptr;
std::string* EagleTest::dir_ = nullptr;

// The MLP adds nothing, the norms are plain, and lm_head row y sums the normalized embeddings
// of the tokens x whose greedy continuation's hops-th token is y (with decoy > 0, row
// (y * 7 + 3) % V sums them decoy times over: y ranks second).
void GuessAfterHops(EagleHeadSpec& s, const Model& m, ThreadPool& pool, int hops, float decoy) {
  const int64_t H = m.config().hidden_size, V = m.config().vocab_size;
  s.w["mlp.down_proj.weight"].assign(H * s.ffn, 0.0f);
  for (const char* n : {"input_layernorm.weight", "hidden_norm.weight",
                        "post_attention_layernorm.weight", "norm.weight"})
    s.w[n].assign(H, 1.0f);
  std::vector<float>& lm = s.w["lm_head.weight"];
  lm.assign(V * H, 0.0f);
  std::vector<float> e(H);
  for (int32_t x = 0; x < V; ++x) {
    const std::vector<int32_t> next = testing::GreedyAlone(m, pool, {x}, hops);
    if (static_cast<int>(next.size()) < hops) continue;
    m.EmbeddingRow(x, e.data());
    double ss = 0;
    for (float f : e) ss += f * f;
    const int64_t y = next[hops - 1], d = (y * 7 + 3) % V;
    for (int64_t i = 0; i < H; ++i) {
      lm[y * H + i] += e[i] / std::sqrt(ss);
      if (decoy > 0) lm[d * H + i] += decoy * e[i] / std::sqrt(ss);
    }
  }
}

// A head that guesses as a bigram model: every row's output is the normalized embedding of
// its token input, and lm_head row y sums the normalized embeddings of the tokens x the model
// greedily follows with y. On a near-bigram model its guesses hold at every depth of a tree.
// How: fc is zero (a committed row's hidden input is 0); q and k are constant (biases), so a
// row attends to itself alone (RoPE makes any other position score far lower); v = norm(e) -
// norm(hidden) and o_proj the identity, so the residual (hidden: a parent's output, itself a
// normalized vector, or 0) cancels; the MLP adds nothing.
EagleHeadSpec BigramHead(const Model& m, ThreadPool& pool) {
  EagleHeadSpec s;
  const int64_t H = m.config().hidden_size, V = m.config().vocab_size;
  s.hidden = s.target_hidden = H;
  s.vocab = V;
  s.heads = s.kv_heads = 4;
  s.head_dim = H / 4;
  s.biases = true;
  s.w["fc.weight"].assign(H * 3 * H, 0.0f);
  s.w["self_attn.q_proj.weight"].assign(H * 2 * H, 0.0f);
  s.w["self_attn.k_proj.weight"].assign(H * 2 * H, 0.0f);
  s.w["self_attn.q_proj.bias"].assign(H, 12.0f);
  s.w["self_attn.k_proj.bias"].assign(H, 12.0f);
  s.w["self_attn.v_proj.bias"].assign(H, 0.0f);
  std::vector<float>& v = s.w["self_attn.v_proj.weight"];
  v.assign(H * 2 * H, 0.0f);
  std::vector<float>& o = s.w["self_attn.o_proj.weight"];
  o.assign(H * H, 0.0f);
  for (int64_t i = 0; i < H; ++i) {
    v[i * 2 * H + i] = 1.0f;
    v[i * 2 * H + H + i] = -1.0f;
    o[i * H + i] = 1.0f;
  }
  GuessAfterHops(s, m, pool, 1, 0.0f);
  return s;
}

// The head by its equations, in double, from the weights the spec holds.
class ReferenceHead {
 public:
  ReferenceHead(const EagleHeadSpec& s, const Model& base) : s_(s), base_(base) {}
  struct Out {
    std::vector<double> prenorm;
    int32_t top = -1;   // best guess (a target id)
    double margin = 0;  // its logit over the second best
    double logp = 0;    // its log-probability under the head
  };
  // fused: the target's 3 states (through fc); else the draft's own hidden input. A tree row
  // (node >= 0) keeps its K/V by node and attends to the cache, its ancestors and itself.
  Out Run(int32_t pos, int32_t token, const std::vector<double>& in, bool fused, int node = -1,
          const std::vector<int>& ancestors = {}) {
    const int64_t H = s_.hidden, hd = s_.head_dim, nh = s_.heads, nkv = s_.kv_heads;
    const bool eagle1 = s_.fc_states == 2;
    std::vector<float> ef(static_cast<size_t>(H));
    base_.EmbeddingRow(token, ef.data());
    std::vector<double> x, cat;
    if (eagle1) {
      // fc over [embedding, feature] (the model's state or the parent's output), plus its bias;
      // the attention reads it without a norm.
      std::vector<double> both(ef.begin(), ef.end());
      both.insert(both.end(), in.begin(), in.end());
      x = cat = MatVec("fc.weight", both, H, "fc.bias");
    } else {
      x = fused ? MatVec("fc.weight", in, H) : in;
      cat = Norm(std::vector<double>(ef.begin(), ef.end()), "input_layernorm.weight");
      const std::vector<double> hn = Norm(x, "hidden_norm.weight");
      if (s_.norm_before_residual) x = hn;  // the residual is the normed state
      cat.insert(cat.end(), hn.begin(), hn.end());
    }
    std::vector<double> q =
        MatVec("self_attn.q_proj.weight", cat, nh * hd, "self_attn.q_proj.bias");
    std::vector<double> k =
        MatVec("self_attn.k_proj.weight", cat, nkv * hd, "self_attn.k_proj.bias");
    std::vector<double> v =
        MatVec("self_attn.v_proj.weight", cat, nkv * hd, "self_attn.v_proj.bias");
    Rope(q, nh, pos);
    Rope(k, nkv, pos);
    std::vector<std::vector<double>> keys = keys_, values = values_;
    if (node < 0) {
      keys_.push_back(k), values_.push_back(v);
      keys = keys_, values = values_;
    } else {
      tree_k_[node] = k, tree_v_[node] = v;
      for (int a : ancestors) keys.push_back(tree_k_[a]), values.push_back(tree_v_[a]);
      keys.push_back(k), values.push_back(v);
    }
    std::vector<double> att(static_cast<size_t>(nh * hd), 0.0);
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / (nh / nkv);
      std::vector<double> w(keys.size());
      double mx = -1e300, sum = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += q[h * hd + d] * keys[i][g * hd + d];
        w[i] = dot / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, w[i]);
      }
      for (double& wi : w) sum += (wi = std::exp(wi - mx));
      for (size_t i = 0; i < keys.size(); ++i)
        for (int64_t d = 0; d < hd; ++d) att[h * hd + d] += w[i] / sum * values[i][g * hd + d];
    }
    const std::vector<double> o = MatVec("self_attn.o_proj.weight", att, H);
    for (int64_t i = 0; i < H; ++i) x[i] += o[i];
    const std::vector<double> post = Norm(x, "post_attention_layernorm.weight");
    std::vector<double> g = MatVec("mlp.gate_proj.weight", post, s_.ffn);
    const std::vector<double> u = MatVec("mlp.up_proj.weight", post, s_.ffn);
    for (int64_t i = 0; i < s_.ffn; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    const std::vector<double> d = MatVec("mlp.down_proj.weight", g, H);
    for (int64_t i = 0; i < H; ++i) x[i] += d[i];
    Out out;
    out.prenorm = x;
    // EAGLE-1/2: the model's output projection (the test's lm_head.weight) on the output as it is.
    const std::vector<double> logits =
        MatVec("lm_head.weight", eagle1 ? x : Norm(x, "norm.weight"), s_.draft_vocab);
    int64_t best = 0, second = -1;
    for (int64_t i = 1; i < s_.draft_vocab; ++i) {
      if (logits[i] > logits[best]) {
        second = best, best = i;
      } else if (second < 0 || logits[i] > logits[second]) {
        second = i;
      }
    }
    out.top = static_cast<int32_t>(best + (s_.d2t.empty() ? 0 : s_.d2t[best]));
    out.margin = logits[best] - logits[second];
    double sum = 0;
    for (double l : logits) sum += std::exp(l - logits[best]);
    out.logp = -std::log(sum);
    return out;
  }

 private:
  std::vector<double> MatVec(const std::string& name, const std::vector<double>& x, int64_t rows,
                             const std::string& bias = "") const {
    const std::vector<float>& w = s_.w.at(name);
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) y[r] += static_cast<double>(w[r * cols + c]) * x[c];
      if (!bias.empty() && s_.w.count(bias)) y[r] += s_.w.at(bias)[r];
    }
    return y;
  }
  std::vector<double> Norm(const std::vector<double>& x, const std::string& name) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * s_.w.at(name)[i];
    return y;
  }
  // Hugging Face's rotate-half RoPE.
  void Rope(std::vector<double>& x, int64_t heads, int32_t pos) const {
    const int64_t hd = s_.head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double a = pos * std::pow(s_.rope_theta, -2.0 * i / hd);
        double& x0 = x[h * hd + i];
        double& x1 = x[h * hd + i + hd / 2];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a),
                     r1 = x1 * std::cos(a) + x0 * std::sin(a);
        x0 = r0, x1 = r1;
      }
    }
  }
  const EagleHeadSpec& s_;
  const Model& base_;
  std::vector<std::vector<double>> keys_, values_;
  std::map<int, std::vector<double>> tree_k_, tree_v_;
};

// An EAGLE-1/2 head that guesses as a bigram model: fc scales the token's embedding by the
// model's output norm weights (the feature's columns are zero), the attention's and the MLP's
// outputs are zero, and the model's own output projection then ranks the next tokens as the
// model does after that token alone (the RMS scale changes no ranking).
EagleHeadSpec BigramHeadEagle1(const Model& m) {
  EagleHeadSpec s;
  const int64_t H = m.config().hidden_size;
  s.hidden = s.target_hidden = H;
  s.vocab = m.config().vocab_size;
  s.fc_states = 2;
  s.biases = true;
  std::vector<float>& fc = s.w["fc.weight"];
  fc.assign(H * 2 * H, 0.0f);
  for (int64_t i = 0; i < H; ++i) fc[i * 2 * H + i] = m.weights().output_norm[i];
  s.w["fc.bias"].assign(H, 0.0f);
  s.w["self_attn.o_proj.weight"].assign(H * s.heads * s.head_dim, 0.0f);
  s.w["mlp.down_proj.weight"].assign(H * s.ffn, 0.0f);
  return s;
}

// An EAGLE-1/2 head that guesses from the model's state alone: fc passes the feature (the
// model's last normed state at p, or a tree row's parent's output) and nothing else adds to it,
// so its guess is the model's own next token at p, the token at p + 1. On the bigram test model
// (tied embeddings, blocks adding nothing: it mostly repeats its last token) that guess holds
// only when the rows get their own positions' states.
EagleHeadSpec StateHeadEagle1(const Model& m) {
  EagleHeadSpec s = BigramHeadEagle1(m);
  const int64_t H = m.config().hidden_size;
  std::vector<float>& fc = s.w["fc.weight"];
  fc.assign(H * 2 * H, 0.0f);
  for (int64_t i = 0; i < H; ++i) fc[i * 2 * H + H + i] = 1.0f;
  return s;
}

// A head that guesses from the model's states: fc keeps the first (layer 0's input at position
// p: the embedding of the token there) and nothing else adds to it, and lm_head row y sums the
// normalized embeddings of the tokens x the model follows greedily by some token and then y.
// Its guesses after position p are then the token two after p's on a near-bigram model, ranked
// second behind a decoy: the tree's second first-level node holds, and the next guesses hold
// only when that node's row's states reach the head (not the first node's, nor the last
// token's).
EagleHeadSpec StateHead(const Model& m, ThreadPool& pool) {
  EagleHeadSpec s;
  const int64_t H = m.config().hidden_size, V = m.config().vocab_size;
  s.hidden = s.target_hidden = H;
  s.vocab = V;
  std::vector<float>& fc = s.w["fc.weight"];
  fc.assign(H * 3 * H, 0.0f);
  for (int64_t i = 0; i < H; ++i) fc[i * 3 * H + i] = 1.0f;
  s.w["self_attn.o_proj.weight"].assign(H * s.heads * s.head_dim, 0.0f);
  GuessAfterHops(s, m, pool, 2, 1.3f);
  return s;
}

// The layouts: EAGLE-3 as SafeAILab's (midlayer., eagle_config) and vLLM speculators' (layers.0.,
// transformer_layer_config, the residual normed first), and EAGLE-1/2 heads.
enum Layout { kSafeAiLab, kSpeculators, kEagle1 };
class EagleLayoutTest : public EagleTest, public ::testing::WithParamInterface<Layout> {};

TEST_P(EagleLayoutTest, TheDraftLayerEqualsANaiveReferenceAndRowsAreIndependent) {
  const Layout layout = GetParam();
  EagleHeadSpec spec = Spec(*model_);
  spec.biases = true;
  spec.draft_vocab = spec.vocab / 2 - 1;  // d2t: draft id i is target id 2 i
  spec.scale = 0.15f;
  spec.speculators = spec.norm_before_residual = layout == kSpeculators;
  if (layout == kSpeculators) spec.prefix = "layers.0.";
  if (layout == kEagle1) spec.fc_states = 2, spec.draft_vocab = spec.vocab;
  const std::string dir = *dir_ + "/ref" + std::to_string(layout);
  WriteEagleHead(dir, spec);
  auto loaded = EagleHead::Load(dir, *model_, DType::kF32);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EagleHead& head = **loaded;
  EXPECT_EQ(head.version(), layout == kEagle1 ? 1 : 3);
  const std::vector<int32_t> want_aux =
      layout == kEagle1 ? std::vector<int32_t>{2} : std::vector<int32_t>{0, 1, 1};
  EXPECT_EQ(head.aux_layers(), want_aux);
  if (layout == kEagle1) spec.w["lm_head.weight"] = OutputProjectionFloats(*model_, *pool_);
  const int64_t H = spec.hidden, W = static_cast<int64_t>(head.aux_layers().size()) * H;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> states(8, std::vector<float>(W));
  for (auto& s : states)
    for (float& x : s) x = normal(rng);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(3 + static_cast<int32_t>(rng() % 200));
  ReferenceHead ref(spec, *model_);
  std::vector<ReferenceHead::Out> expected;
  for (int p = 0; p < 8; ++p)
    expected.push_back(
        ref.Run(p, tokens[p + 1], std::vector<double>(states[p].begin(), states[p].end()), true));
  auto check = [&](const float* got, const ReferenceHead::Out& want, int32_t top,
                   const char* what) {
    double worst = 0;
    for (int64_t i = 0; i < H; ++i)
      worst = std::max(worst, std::abs(got[i] - want.prenorm[i]) / (1 + std::abs(want.prenorm[i])));
    EXPECT_LT(worst, 2e-4) << what;
    if (top >= 0 && want.margin > 1e-3) {
      EXPECT_EQ(top, want.top) << what;
    }
  };
  // Committed rows in two calls (the cache grows), the last of each wanting guesses.
  EagleCache cache;
  std::vector<float> out(8 * H);
  std::vector<int32_t> top;
  for (auto [first, last] : {std::pair{0, 6}, std::pair{6, 8}}) {
    std::vector<EagleRow> rows;
    for (int p = first; p < last; ++p) {
      EagleRow r;
      r.cache = &cache;
      r.position = p;
      r.token = tokens[p + 1];
      r.hidden = states[p].data();
      r.top = p + 1 == last;
      rows.push_back(r);
    }
    std::vector<float> logp;
    head.Forward(rows, /*fuse=*/true, 3, out.data() + first * H, &top, *pool_, &logp);
    ASSERT_EQ(top.size(), 3u);
    ASSERT_EQ(logp.size(), 3u);
    // (EAGLE-1/2's projection is the model's Q8_0 one, run on quantized activations.)
    EXPECT_NEAR(logp[0], expected[last - 1].logp, layout == kEagle1 ? 3e-2 : 1e-4)
        << "the best guess's log-probability";
    EXPECT_GE(logp[0], logp[1]);
    EXPECT_GE(logp[1], logp[2]);
    for (int p = first; p < last; ++p)
      check(out.data() + p * H, expected[p], p + 1 == last ? top[0] : -1, "a committed row");
  }
  EXPECT_EQ(cache.end(head.kv_dim()), 8);
  // A tree: nodes 0 and 1 at depth 1 (position 8) on row 7's output, node 2 under node 0.
  auto as_double = [&](const float* f) { return std::vector<double>(f, f + H); };
  const ReferenceHead::Out n0 = ref.Run(8, tokens[9], as_double(out.data() + 7 * H), false, 0);
  const ReferenceHead::Out n1 = ref.Run(8, tokens[10], as_double(out.data() + 7 * H), false, 1);
  EagleTree tree;
  tree.k.resize(3 * head.kv_dim());
  tree.v.resize(3 * head.kv_dim());
  auto tree_row = [&](EagleCache* c, EagleTree* t, int node, int32_t token, const float* in,
                      const int32_t* anc, int n_anc) {
    EagleRow r;
    r.cache = c;
    r.position = 8 + n_anc;
    r.token = token;
    r.hidden = in;
    r.tree = t;
    r.node = node;
    r.ancestors = anc;
    r.num_ancestors = n_anc;
    r.top = true;
    return r;
  };
  std::vector<float> level1(2 * H), level2(H);
  std::vector<int32_t> top1, top2;
  head.Forward({tree_row(&cache, &tree, 0, tokens[9], out.data() + 7 * H, nullptr, 0),
                tree_row(&cache, &tree, 1, tokens[10], out.data() + 7 * H, nullptr, 0)},
               false, 2, level1.data(), &top1, *pool_);
  check(level1.data(), n0, top1[0], "tree node 0");
  check(level1.data() + H, n1, top1[2], "tree node 1");
  const int32_t anc[] = {0};
  const ReferenceHead::Out n2 = ref.Run(9, tokens[11], as_double(level1.data()), false, 2, {0});
  head.Forward({tree_row(&cache, &tree, 2, tokens[11], level1.data(), anc, 1)}, false, 2,
               level2.data(), &top2, *pool_);
  check(level2.data(), n2, top2[0], "tree node 2 (over its ancestor)");
  EXPECT_EQ(cache.end(head.kv_dim()), 8) << "tree rows must not join the cache";

  // The same node beside another sequence's rows, in one call: bit for bit the same.
  EagleCache other;
  std::vector<EagleRow> mixed;
  for (int p = 0; p < 5; ++p) {
    EagleRow r;
    r.cache = &other;
    r.position = p;
    r.token = tokens[p];
    r.hidden = states[7 - p].data();
    r.top = true;
    mixed.push_back(r);
  }
  EagleTree tree2 = tree;
  mixed.insert(mixed.begin() + 2, tree_row(&cache, &tree2, 2, tokens[11], level1.data(), anc, 1));
  std::vector<float> mixed_out(mixed.size() * H);
  std::vector<int32_t> mixed_top;
  head.Forward(mixed, false, 2, mixed_out.data(), &mixed_top, *pool_);
  EXPECT_EQ(0, std::memcmp(mixed_out.data() + 2 * H, level2.data(), H * sizeof(float)));
  EXPECT_EQ(mixed_top[4], top2[0]);
  EXPECT_EQ(mixed_top[5], top2[1]);

  // A committed row before the cache's end cuts what followed (a sequence recomputed); one past
  // it (a gap: prefix blocks the head never saw) starts the cache again there.
  std::vector<float> one(H);
  EagleRow again;
  again.cache = &cache;
  again.position = 3;
  again.token = tokens[4];
  again.hidden = states[3].data();
  head.Forward({again}, true, 1, one.data(), nullptr, *pool_);
  EXPECT_EQ(cache.start, 0);
  EXPECT_EQ(cache.end(head.kv_dim()), 4);
  EXPECT_EQ(0, std::memcmp(one.data(), out.data() + 3 * H, H * sizeof(float)))
      << "the same row over the same cache prefix";
  again.position = 20;
  head.Forward({again}, true, 1, one.data(), nullptr, *pool_);
  EXPECT_EQ(cache.start, 20);
  EXPECT_EQ(cache.end(head.kv_dim()), 21);
}

// The runner keeps the residual stream at the input of the layers a head reads: layer 0's is
// the tokens' embeddings; layer 1's, normed and projected, gives the logits of the model's first
// layer alone; id 2 (the layer count: EAGLE-1/2's feature) is the final normed state, whose
// projection is the model's logits.
TEST_F(EagleTest, TheRunnerKeepsTheInputsOfTheLayersAHeadReads) {
  ExecutorConfig c;
  c.num_threads = 1;
  c.tokens_per_block = 16;
  c.max_tokens_in_paged_kv_cache = 256;
  LocalModelRunner full(*model_, c);
  EXPECT_FALSE(full.CaptureLayerInputs({0, 3}));  // past the model's 2 layers and its output
  ASSERT_TRUE(full.CaptureLayerInputs({0, 1, 1, 2}));
  const std::vector<int32_t> tokens = {1, 40, 41, 42, 43, 44};
  const int64_t T = static_cast<int64_t>(tokens.size()), H = model_->config().hidden_size,
                V = model_->config().vocab_size;
  const std::vector<int32_t> table = {0};
  BatchPlan plan;
  SequenceChunk ch;
  ch.token_ids = tokens.data();
  ch.num_tokens = static_cast<int32_t>(T);
  ch.block_table = table.data();
  ch.num_blocks = 1;
  ch.num_logits = static_cast<int32_t>(T);
  plan.chunks.push_back(ch);
  std::vector<float> logits(T * V);
  ASSERT_TRUE(full.Forward(plan, logits.data()).ok());
  const float* states = full.LayerInputs();
  ASSERT_NE(states, nullptr);
  std::vector<float> e(H);
  for (int64_t t = 0; t < T; ++t) {
    model_->EmbeddingRow(tokens[t], e.data());
    EXPECT_EQ(0, std::memcmp(states + t * 4 * H, e.data(), H * sizeof(float))) << "row " << t;
    EXPECT_EQ(0, std::memcmp(states + t * 4 * H + H, states + t * 4 * H + 2 * H, H * 4));
  }
  auto first = Model::Load(*path_, {.num_layers = 1});
  ASSERT_TRUE(first.ok());
  LocalModelRunner one(**first, c);
  std::vector<float> want(T * V), rows(T * H), got(T * V);
  // The final normed state, projected: the full model's logits.
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(rows.data() + t * H, states + t * 4 * H + 3 * H, H * sizeof(float));
  kernels::MatMulScratch scratch;
  kernels::MatMul(model_->weights().output, rows.data(), T, got.data(), *pool_, scratch);
  for (int64_t i = 0; i < T * V; ++i) ASSERT_NEAR(got[i], logits[i], 1e-4) << "logit " << i;
  ASSERT_TRUE(one.Forward(plan, want.data()).ok());
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(rows.data() + t * H, states + t * 4 * H + H, H * sizeof(float));
  kernels::RmsNorm(rows.data(), model_->weights().output_norm.data(), T, H,
                   model_->config().norm_eps, rows.data());
  kernels::MatMul(model_->weights().output, rows.data(), T, got.data(), *pool_, scratch);
  double worst = 0;
  for (int64_t i = 0; i < T * V; ++i) worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Layouts, EagleLayoutTest,
                         ::testing::Values(kSafeAiLab, kSpeculators, kEagle1),
                         [](const auto& info) {
                           return info.param == kSafeAiLab     ? "safeailab"
                                  : info.param == kSpeculators ? "speculators"
                                                               : "eagle1";
                         });

TEST_F(EagleTest, AHeadThatDoesNotMatchItsModelIsRefusedWithTheFieldNamed) {
  auto refused = [&](EagleHeadSpec spec, const std::string& want,
                     const std::function<void(const std::string&)>& edit = nullptr) {
    static int n = 0;
    const std::string dir = *dir_ + "/bad" + std::to_string(n++);
    WriteEagleHead(dir, spec);
    if (edit) edit(dir);
    auto h = EagleHead::Load(dir, *model_);
    EXPECT_FALSE(h.ok()) << want;
    if (!h.ok()) {
      EXPECT_NE(h.status().message().find(want), std::string::npos) << h.status().ToString();
    }
  };
  EagleHeadSpec good = Spec(*model_);
  {
    EagleHeadSpec s = good;
    s.target_hidden = 96;
    refused(s, "target hidden size is 96 but the model's hidden size is 64");
  }
  {
    EagleHeadSpec s = good;
    s.vocab += 7;
    refused(s, "vocab_size");
  }
  {
    EagleHeadSpec s = good;
    s.aux = {0, 1, 5};
    refused(s, "fuses the input of layer 5 but the model has 2 layers");
  }
  {
    EagleHeadSpec s = good;
    s.fc_states = 2;  // an EAGLE-1/2 head of another width than its model
    s.hidden = 96;
    refused(s, "hidden_size, with no target_hidden_size) is 96 but the model's hidden size is 64");
  }
  {
    EagleHeadSpec s = good;
    s.layers = 2;
    refused(s, "num_hidden_layers");
  }
  {
    EagleHeadSpec s = good;
    s.draft_vocab = 40;
    s.d2t.assign(40, 0);
    s.d2t[39] = good.vocab;  // past the vocabulary
    refused(s, "d2t maps draft id 39 outside the vocabulary");
  }
  {
    EagleHeadSpec s = good;
    s.draft_vocab = 40;
    s.write_d2t = false;
    refused(s, "'d2t' is missing");
  }
  {
    // The heads' shape against config.json: a wrong intermediate_size.
    refused(good, "is [96, 64], not [100, 64]", [](const std::string& dir) {
      std::ifstream in(dir + "/config.json");
      nlohmann::json j = nlohmann::json::parse(in);
      j["intermediate_size"] = 100;
      std::ofstream(dir + "/config.json") << j.dump();
    });
  }
  refused(good, "pytorch_model.bin only", [](const std::string& dir) {
    fs::rename(dir + "/model.safetensors", dir + "/pytorch_model.bin");
  });
  refused(good, "layers.0.mlp.down_proj.weight' is missing", [](const std::string& dir) {
    // A file of every tensor but one.
    auto f = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(f.ok());
    std::vector<testing::HfTensor> keep;
    for (const auto& [name, t] : (*f)->tensors()) {
      if (name.find("down_proj") != std::string::npos) continue;
      std::vector<float> v(t.num_bytes / 4);
      std::memcpy(v.data(), t.data, t.num_bytes);
      keep.push_back({name, t.shape, v});
    }
    f->reset();
    testing::WriteSafetensors(dir + "/model.safetensors", keep);
  });
  // config.json values of the wrong kind: refused, never thrown.
  auto edit_config = [](std::function<void(nlohmann::json&)> f) {
    return [f](const std::string& dir) {
      std::ifstream in(dir + "/config.json");
      nlohmann::json j = nlohmann::json::parse(in);
      f(j);
      std::ofstream(dir + "/config.json") << j.dump();
    };
  };
  refused(good, "rope_scaling's rope_type is not a string", edit_config([](nlohmann::json& j) {
            j["rope_scaling"] = {{"rope_type", 3}, {"factor", 8.0}};
          }));
  refused(good, "factor is not a positive number", edit_config([](nlohmann::json& j) {
            j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "eight"}};
          }));
  refused(good, "high_freq_factor must exceed", edit_config([](nlohmann::json& j) {
            j["rope_scaling"] = {
                {"rope_type", "llama3"}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0}};
          }));
  refused(good, "head_dim must be at least 2", edit_config([](nlohmann::json& j) {
            j.erase("head_dim");
            j["num_attention_heads"] = 128;
            j["num_key_value_heads"] = 128;
          }));
  // The speculators layout nesting its own key: read once, not recursively.
  refused(good, "target hidden size is 96", edit_config([](nlohmann::json& j) {
            j["transformer_layer_config"] = {{"hidden_size", 64},
                                             {"transformer_layer_config", {{"hidden_size", 1}}}};
            j["target_hidden_size"] = 96;
          }));
  // EAGLE-1/2 heads: the model's vocabulary, no EAGLE-3 keys.
  EagleHeadSpec eagle1 = good;
  eagle1.fc_states = 2;
  refused(eagle1, "hidden size and vocabulary are the model's",
          edit_config([](nlohmann::json& j) { j["draft_vocab_size"] = 100; }));
  refused(eagle1, "but config.json has EAGLE-3 keys", edit_config([](nlohmann::json& j) {
            j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {0, 1, 1}}};
          }));
  // The default layers need 4: the tiny model has 2.
  refused(good, "EAGLE-3's default layers (2, L/2, L-3) need 4", [](const std::string& dir) {
    std::ifstream in(dir + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j.erase("eagle_config");
    std::ofstream(dir + "/config.json") << j.dump();
  });
}

// On a bigram model (its blocks add nothing) BigramHead's guesses hold often, along branches that
// are not the tree's first path too; a random head's rarely hold. Greedy output with either equals
// the output without drafts, for 64 requests in flight with prefix reuse, chunked prompts and beam
// searches in the same steps.
TEST_F(EagleTest, GreedyOutputIsExactlyTheOutputWithoutDrafts) {
  std::unique_ptr<Model> bigram = testing::NearBigramModel(*dir_ + "/bigram.gguf", 0.0f);
  ASSERT_TRUE(bigram);
  enum Kind { kBigram, kStates, kRandom, kBigram1, kStates1, kRandom1 };  // ...1: EAGLE-1/2
  // The tree: the default chain, Medusa's 14-node tree of choices, or EAGLE-2's dynamic tree.
  enum Shape { kChain, kTree, kDynamic };
  for (const auto& [kind, shape] :
       {std::pair{kBigram, kTree}, std::pair{kBigram, kChain}, std::pair{kStates, kTree},
        std::pair{kRandom, kTree}, std::pair{kBigram1, kTree}, std::pair{kStates1, kChain},
        std::pair{kRandom1, kTree}, std::pair{kBigram, kDynamic}, std::pair{kRandom, kDynamic},
        std::pair{kBigram1, kDynamic}}) {
    const bool tree = shape == kTree;
    const bool predictable = kind != kRandom && kind != kRandom1;
    const Model& m = predictable ? *bigram : *model_;
    EagleHeadSpec spec = kind == kBigram    ? BigramHead(m, *pool_)
                         : kind == kStates  ? StateHead(m, *pool_)
                         : kind == kBigram1 ? BigramHeadEagle1(m)
                         : kind == kStates1 ? StateHeadEagle1(m)
                                            : Spec(m);
    if (kind == kRandom1) spec.fc_states = 2, spec.biases = true;
    const char* name = kind == kBigram    ? "bigram"
                       : kind == kStates  ? "states"
                       : kind == kRandom  ? "random"
                       : kind == kBigram1 ? "eagle1-bigram"
                       : kind == kStates1 ? "eagle1-states"
                                          : "eagle1-random";
    const std::string dir = *dir_ + "/" + name + "-head";
    WriteEagleHead(dir, spec);
    auto head = EagleHead::Load(dir, m);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    std::mt19937 rng(5);
    const int n = 64;
    std::vector<Request> requests;
    for (int i = 0; i < n; ++i) {
      Request r;
      // Prompts that share prefixes (reuse), some past max_num_tokens (chunked).
      r.prompt_ids.assign(1 + rng() % 200, 0);
      for (auto& t : r.prompt_ids) t = static_cast<int32_t>(3 + rng() % 256);
      if (i % 4 == 3) r.prompt_ids = requests[i - 1].prompt_ids, r.prompt_ids.push_back(7);
      r.max_tokens = 1 + static_cast<int32_t>(rng() % 48);
      r.sampling.temperature = 0;
      r.exclude_input_in_output = true;
      if (i % 6 == 0) r.num_draft_tokens = 0;
      if (i % 6 == 1) r.num_draft_tokens = 3;  // a cut tree
      if (i % 8 == 5) r.beam_width = 2;
      requests.push_back(r);
    }
    ExecutorConfig c = testing::TreeDraftingConfig(SpeculativeMode::kNone);
    c.max_beam_width = 2;
    auto plain = Executor::Create(m, c);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    c.speculative_mode = SpeculativeMode::kEagle;
    c.eagle_head = std::shared_ptr<EagleHead>(std::move(head).value());
    // A tree with branches (accepted branches off its first path move their K/V), or the
    // default chain.
    if (tree) c.eagle_choices = DefaultMedusaChoices(4);
    if (shape == kDynamic) {
      // Top-3 of each of 3 expanded nodes a level, 4 levels, the best 8 nodes verified.
      c.eagle_dynamic_tree = true;
      c.eagle_dynamic_tree_max_top_k = 3;
      c.eagle_num_layers = 4;
      c.max_draft_tokens = 8;
    }
    auto made = Executor::Create(m, c);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    Executor& e = **made;
    std::vector<RequestId> ids, plain_ids;
    for (int i = 0; i < n; ++i) {
      auto id = e.Enqueue(requests[i]);
      ASSERT_TRUE(id.ok());
      ids.push_back(*id);
      auto pid = (*plain)->Enqueue(requests[i]);
      ASSERT_TRUE(pid.ok());
      plain_ids.push_back(*pid);
    }
    int64_t drafts = 0, accepted = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<Result> rs = testing::CollectResults(e, ids[i]);
      std::vector<Result> ps = testing::CollectResults(**plain, plain_ids[i]);
      ASSERT_FALSE(rs.empty());
      ASSERT_FALSE(ps.empty());
      ASSERT_TRUE(rs.back().error.ok()) << rs.back().error.ToString();
      EXPECT_EQ(rs.back().output_token_ids, ps.back().output_token_ids) << "request " << i;
      if (requests[i].beam_width == 1) {
        EXPECT_EQ(rs.back().output_token_ids,
                  testing::GreedyAlone(m, *pool_, requests[i].prompt_ids, requests[i].max_tokens))
            << "request " << i;
      }
      drafts += rs.back().stats.num_draft_tokens;
      accepted += rs.back().stats.num_accepted_draft_tokens;
    }
    std::printf("%s head, %s: drafts %lld, accepted %lld, K/V slots moved %lld\n", name,
                shape == kTree    ? "tree"
                : shape == kChain ? "chain"
                                  : "dynamic tree",
                static_cast<long long>(drafts), static_cast<long long>(accepted),
                static_cast<long long>(e.num_tree_kv_moves()));
    EXPECT_GT(drafts, 0);
    if (kind == kBigram || kind == kBigram1 || kind == kStates1) {
      EXPECT_GT(accepted, drafts / 10);
    }
    // About a token a tree (of 14 drafts), the second node: 9.7% of the drafts here. Feeding
    // the head the first node's states instead of the accepted one's held 5.3% (each wrong
    // state spoils the next guess).
    if (kind == kStates) EXPECT_GT(accepted, drafts / 14);
    if (predictable && tree) {
      EXPECT_GT(e.num_tree_kv_moves(), 0) << "no branch off the tree's first path was accepted";
    }
    testing::ExpectNoKvLeaks(e);
  }
}

// Trees of EAGLE guesses keep the sampling distribution: the second to fourth tokens of many
// seeded samples with a head that often guesses right, against as many without (chi-square).
TEST_F(EagleTest, SeededSamplingKeepsItsDistribution) {
  std::unique_ptr<Model> bigram = testing::NearBigramModel(*dir_ + "/bigram15.gguf", 0.15f);
  ASSERT_TRUE(bigram);
  EagleHeadSpec spec = BigramHead(*bigram, *pool_);
  WriteEagleHead(*dir_ + "/bigram15-head", spec);
  ExecutorConfig c;
  c.num_threads = 1;
  c.tokens_per_block = 16;
  c.max_tokens_in_paged_kv_cache = 4096;
  auto plain = Executor::Create(*bigram, c);
  ASSERT_TRUE(plain.ok());
  c.speculative_mode = SpeculativeMode::kEagle;
  c.eagle_head =
      std::shared_ptr<EagleHead>(EagleHead::Load(*dir_ + "/bigram15-head", *bigram).value());
  c.adaptive_draft_length = false;
  c.eagle_choices = DefaultMedusaChoices(4);  // three guesses for the first of top-3 samples
  auto eagle = Executor::Create(*bigram, c);
  ASSERT_TRUE(eagle.ok()) << eagle.status().ToString();
  testing::ExpectSamplingKept(**plain, **eagle, {1, 40, 41, 42, 43, 44, 45, 46, 47, 48});
  testing::ExpectNoKvLeaks(**eagle);
  // EAGLE-2's dynamic tree: its branches differ per step and per sequence.
  c.eagle_choices.clear();
  c.eagle_dynamic_tree = true;
  c.eagle_dynamic_tree_max_top_k = 3;
  c.eagle_num_layers = 3;
  c.max_draft_tokens = 6;
  auto dynamic = Executor::Create(*bigram, c);
  ASSERT_TRUE(dynamic.ok()) << dynamic.status().ToString();
  testing::ExpectSamplingKept(**plain, **dynamic, {1, 40, 41, 42, 43, 44, 45, 46, 47, 48});
  testing::ExpectNoKvLeaks(**dynamic);
}

TEST_F(EagleTest, TheExecutorNeedsAHeadAndChoicesItCanDraft) {
  ExecutorConfig c;
  c.speculative_mode = SpeculativeMode::kEagle;
  auto no_head = Executor::Create(*model_, c);
  ASSERT_FALSE(no_head.ok());
  EXPECT_NE(no_head.status().message().find("needs an EAGLE head"), std::string::npos);
  EagleHeadSpec spec = Spec(*model_);
  WriteEagleHead(*dir_ + "/choices", spec);
  c.eagle_head = std::shared_ptr<EagleHead>(EagleHead::Load(*dir_ + "/choices", *model_).value());
  c.eagle_choices = {{0, 1}};
  auto no_prefix = Executor::Create(*model_, c);
  ASSERT_FALSE(no_prefix.ok());
  EXPECT_NE(no_prefix.status().message().find("eagle_choices: a path's prefix is missing"),
            std::string::npos)
      << no_prefix.status().message();
  c.eagle_choices = {{0}, {70}};
  auto too_far = Executor::Create(*model_, c);
  ASSERT_FALSE(too_far.ok());
  EXPECT_NE(too_far.status().message().find("[0, 63]"), std::string::npos);
  c.eagle_choices.assign(1, std::vector<int32_t>(17, 0));
  auto too_deep = Executor::Create(*model_, c);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.status().message().find("1 to 16 top-k indices"), std::string::npos)
      << too_deep.status().message();
  // EAGLE-2's dynamic tree: its own bounds, and no choices beside it.
  {
    ExecutorConfig d = c;
    d.eagle_choices.clear();
    d.eagle_dynamic_tree = true;
    EXPECT_TRUE(Executor::Create(*model_, d).ok());
    auto refused = [&](ExecutorConfig x, const std::string& want) {
      auto e = Executor::Create(*model_, x);
      ASSERT_FALSE(e.ok()) << want;
      EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().message();
    };
    ExecutorConfig x = d;
    x.eagle_choices = {{0}};
    refused(x, "eagle_choices and eagle_use_dynamic_tree exclude each other");
    x = d;
    x.eagle_dynamic_tree_max_top_k = 0;
    refused(x, "eagle_dynamic_tree_max_top_k must be in [1, 64]");
    x = d;
    x.eagle_num_layers = 17;
    refused(x, "eagle_num_layers must be in [1, 16]");
    x = d;
    x.max_draft_tokens = 33;
    refused(x, "max_draft_tokens must be in [0, 32]");
    x.max_draft_tokens = 0;
    refused(x, "max_draft_len (the dynamic tree's nodes) must be in [1, 32]");
  }
  auto parsed =
      ParseMedusaChoices("[[0], [0, 0], [1]]", kMaxEagleChoicesDepth, 63, "eagle_choices");
  ASSERT_TRUE(parsed.ok());
  c.eagle_choices = *parsed;
  EXPECT_TRUE(Executor::Create(*model_, c).ok());
}

}  // namespace
}  // namespace inflight
