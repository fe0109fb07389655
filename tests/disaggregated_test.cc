// Disaggregated serving in the engine: a context-only executor hands each request's prompt
// K/V to a generation-only executor (kvcache/kv_handoff.h), and the pair gives exactly the
// outputs of one aggregated executor for parallel_test's in-flight scenario (greedy, streamed,
// seeded sampling, n = 2, beams, a shared prefix, chunked prompts, LoRA), on a dense and a MoE
// model. A hand-off that is corrupt, truncated or for another prompt, salt or model is
// refused, and imported K/V is never offered to other requests.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "engine_test_util.h"
#include "parallel_scenario.h"

namespace inflight::testing {
namespace {

struct Collected {
  std::vector<std::vector<int32_t>> seqs;
  std::string error;
  std::vector<Result> finals;  // the final result(s)
};

Collected Collect(Executor& e, RequestId id, bool streaming) {
  Collected c;
  for (Result& r : CollectResults(e, id)) {
    if (!r.error.ok()) c.error = r.error.message();
    if (!r.beams.empty()) {
      c.seqs.clear();
      for (const BeamOutput& b : r.beams) c.seqs.push_back(b.output_token_ids);
    } else {
      if (c.seqs.size() <= static_cast<size_t>(r.sequence_index))
        c.seqs.resize(r.sequence_index + 1);
      auto& seq = c.seqs[r.sequence_index];
      if (!streaming) seq.clear();
      seq.insert(seq.end(), r.output_token_ids.begin(), r.output_token_ids.end());
    }
    if (r.is_final) c.finals.push_back(std::move(r));
  }
  return c;
}

std::unique_ptr<Executor> MakeExecutor(const Model& model) {
  auto e = Executor::Create(model, ScenarioExecutorConfig(ScenarioNamed("default")));
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The context phase of `r` on `ctx`: its hand-off (null on failure, with the error).
std::shared_ptr<const KvHandoff> ContextPhase(Executor& ctx, Request r, std::string* error) {
  r.request_type = RequestType::kContextOnly;
  r.output = nullptr;
  auto id = ctx.Enqueue(r);
  if (!id.ok()) {
    *error = id.status().message();
    return nullptr;
  }
  Collected c = Collect(ctx, *id, false);
  if (!c.error.empty() || c.finals.empty()) {
    *error = c.error.empty() ? "no final result" : c.error;
    return nullptr;
  }
  if (!c.finals.back().context_phase) *error = "the context phase returned no hand-off";
  return c.finals.back().context_phase;
}

void ExpectDisaggregatedEqualsAggregated(const std::string& path) {
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<Request> requests = ScenarioRequests((*model)->config());
  auto aggregated = MakeExecutor(**model), ctx = MakeExecutor(**model), gen = MakeExecutor(**model);
  ASSERT_TRUE(aggregated && ctx && gen);
  std::vector<RequestId> agg_ids;
  for (const Request& r : requests) {
    auto id = aggregated->Enqueue(r);
    ASSERT_TRUE(id.ok()) << id.status().message();
    agg_ids.push_back(*id);
  }
  // Context phases of all requests in flight together, then every generation phase, so
  // both executors batch them as a server would.
  std::vector<RequestId> ctx_ids;
  for (Request r : requests) {
    r.request_type = RequestType::kContextOnly;
    auto id = ctx->Enqueue(r);
    ASSERT_TRUE(id.ok()) << id.status().message();
    ctx_ids.push_back(*id);
  }
  std::vector<std::shared_ptr<const KvHandoff>> handoffs;
  for (size_t i = 0; i < requests.size(); ++i) {
    Collected c = Collect(*ctx, ctx_ids[i], false);
    ASSERT_EQ(c.error, "") << "request " << i;
    ASSERT_EQ(c.finals.size(), 1u);
    ASSERT_TRUE(c.finals[0].context_phase) << "request " << i;
    // The wire form: serialized, parsed back.
    const auto bytes = SerializeKvHandoff(*c.finals[0].context_phase);
    auto parsed = ParseKvHandoff(bytes.data(), bytes.size());
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    handoffs.push_back(std::make_shared<KvHandoff>(std::move(parsed).value()));
    const int64_t prompt = static_cast<int64_t>(requests[i].prompt_ids.size());
    EXPECT_EQ(static_cast<int64_t>(handoffs.back()->tokens.size()), prompt - 1) << i;
    EXPECT_EQ(handoffs.back()->num_blocks(), (prompt - 1 + 15) / 16) << "request " << i;
    EXPECT_EQ(handoffs.back()->first_tokens.size(), 1u);
  }
  std::vector<RequestId> gen_ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    Request r = requests[i];
    r.request_type = RequestType::kGenerationOnly;
    r.context_phase = handoffs[i];
    auto id = gen->Enqueue(r);
    ASSERT_TRUE(id.ok()) << id.status().message();
    gen_ids.push_back(*id);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Collected want = Collect(*aggregated, agg_ids[i], requests[i].streaming);
    const Collected got = Collect(*gen, gen_ids[i], requests[i].streaming);
    ASSERT_EQ(want.error, "");
    EXPECT_EQ(got.error, "") << "request " << i;
    EXPECT_EQ(got.seqs, want.seqs) << "request " << i;
    ASSERT_FALSE(got.finals.empty());
    const RequestStats& st = got.finals.back().stats;
    EXPECT_EQ(st.num_imported_blocks, handoffs[i]->num_blocks()) << "request " << i;
    if (handoffs[i]->num_blocks() > 0) {
      EXPECT_GT(st.kv_transfer_ms, 0.0);
    }
    // The context phase drew the first token the generation phase draws (one sequence, no
    // beams: the router streams it early).
    if (requests[i].num_return_sequences == 1 && requests[i].beam_width == 1) {
      ASSERT_FALSE(got.seqs.empty());
      const auto& s = got.seqs[0];
      const size_t first = requests[i].streaming ? 0 : requests[i].prompt_ids.size();
      ASSERT_GT(s.size(), first);
      EXPECT_EQ(s[first], handoffs[i]->first_tokens[0]) << "request " << i;
    }
  }
  // A cancelled generation phase: a long stream, cancelled after 5 tokens, streamed the
  // aggregated run's first tokens and ends as cancelled.
  {
    Request longer = requests[1];
    longer.max_tokens = 300;
    longer.streaming = true;
    std::string error;
    auto handoff = ContextPhase(*ctx, longer, &error);
    ASSERT_TRUE(handoff) << error;
    auto agg_id = aggregated->Enqueue(longer);
    ASSERT_TRUE(agg_id.ok());
    const Collected whole = Collect(*aggregated, *agg_id, true);
    longer.request_type = RequestType::kGenerationOnly;
    longer.context_phase = handoff;
    auto id = gen->Enqueue(longer);
    ASSERT_TRUE(id.ok());
    std::vector<int32_t> streamed;
    FinishReason finish = FinishReason::kNotFinished;
    bool final = false;
    for (int polls = 0; !final && polls < 12000; ++polls) {
      for (Result& r : gen->AwaitResponses(*id, std::chrono::milliseconds(5))) {
        streamed.insert(streamed.end(), r.output_token_ids.begin(), r.output_token_ids.end());
        if (r.is_final) final = true, finish = r.finish_reason;
      }
      if (streamed.size() >= 5 && !final) gen->Cancel(*id);
    }
    EXPECT_EQ(finish, FinishReason::kCancelled);
    ASSERT_FALSE(whole.seqs.empty());
    ASSERT_LE(streamed.size(), whole.seqs[0].size());
    EXPECT_EQ(streamed,
              std::vector<int32_t>(whole.seqs[0].begin(), whole.seqs[0].begin() + streamed.size()));
  }
  for (Executor* e : {aggregated.get(), ctx.get(), gen.get()}) {
    for (int i = 0; i < 400 && (e->num_unfinished_requests() > 0 || e->KvBlockCounts().used > 0);
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(e->KvBlockCounts().used, 0) << "blocks leaked";
  }
  // Imported K/V is never offered for reuse: the generation executor's cache holds nothing.
  EXPECT_EQ(gen->KvBlockCounts().cached, 0);
}

TEST(DisaggregatedTest, ContextThenGenerationEqualsAggregatedDense) {
  const std::string path = WriteTinyModel("disagg_dense");
  ExpectDisaggregatedEqualsAggregated(path);
  std::filesystem::remove(path);
}

TEST(DisaggregatedTest, ContextThenGenerationEqualsAggregatedMoe) {
  auto config = PresetConfig(Architecture::kQwen3Moe, "tiny");
  ASSERT_TRUE(config.ok());
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  params.seed = 5;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("disagg_moe_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  ASSERT_TRUE(WriteRandomGguf(params, ByteFallbackVocab(), path).ok());
  ExpectDisaggregatedEqualsAggregated(path);
  std::filesystem::remove(path);
}

TEST(DisaggregatedTest, BadHandOffsAreRefusedNeverDecoded) {
  const std::string path = WriteTinyModel("disagg_bad");
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  auto ctx = MakeExecutor(**model), gen = MakeExecutor(**model);
  ASSERT_TRUE(ctx && gen);
  Request r;
  for (int i = 0; i < 70; ++i) r.prompt_ids.push_back(5 + (i * 37) % 200);
  r.max_tokens = 6;
  r.sampling.temperature = 0;
  std::string error;
  auto handoff = ContextPhase(*ctx, r, &error);
  ASSERT_TRUE(handoff) << error;
  ASSERT_EQ(handoff->num_blocks(), 5);  // 69 tokens: 4 whole blocks and 5 of a fifth
  std::vector<uint8_t> bytes = SerializeKvHandoff(*handoff);

  // One flipped bit anywhere: refused by the checksums, never decoded.
  for (size_t at : {size_t{3}, size_t{40}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> bad = bytes;
    bad[at] ^= 0x10;
    auto parsed = ParseKvHandoff(bad.data(), bad.size());
    EXPECT_FALSE(parsed.ok()) << "flip at " << at;
    if (at >= 96) {
      EXPECT_NE(parsed.status().message().find("checksum"), std::string::npos)
          << parsed.status().message();
    }
  }
  // Truncated, extended, empty, or a header announcing more than it holds.
  for (size_t n : {size_t{0}, size_t{10}, size_t{96}, bytes.size() - 8}) {
    EXPECT_FALSE(ParseKvHandoff(bytes.data(), n).ok()) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(ParseKvHandoff(longer.data(), longer.size()).ok());

  auto enqueue_error = [&](Request q) {
    auto id = gen->Enqueue(q);
    return id.ok() ? std::string() : id.status().message();
  };
  Request g = r;
  g.request_type = RequestType::kGenerationOnly;
  EXPECT_NE(enqueue_error(g).find("needs context_phase_params"), std::string::npos);
  // Another prompt's hand-off.
  g.context_phase = handoff;
  g.prompt_ids[3] += 1;
  EXPECT_NE(enqueue_error(g).find("another prompt"), std::string::npos);
  // A prompt that ends inside the hand-off: the last token must be left to compute.
  g.prompt_ids = std::vector<int32_t>(r.prompt_ids.begin(), r.prompt_ids.begin() + 69);
  EXPECT_NE(enqueue_error(g).find("another prompt"), std::string::npos);
  // Another salt (a tenant's cache) or model layout.
  g.prompt_ids = r.prompt_ids;
  g.cache_salt = 99;
  EXPECT_NE(enqueue_error(g).find("cache salt"), std::string::npos);
  g.cache_salt = 0;
  auto other = std::make_shared<KvHandoff>(*handoff);
  other->layout_fingerprint ^= 1;
  g.context_phase = other;
  EXPECT_NE(enqueue_error(g).find("another model"), std::string::npos);
  // Hand-off fields on requests that do not read them.
  Request plain = r;
  plain.context_phase = handoff;
  EXPECT_NE(enqueue_error(plain).find("only read by a generation_only"), std::string::npos);

  // Forged K/V with a valid checksum changes only its own request, and leaves nothing in the
  // cache for others: an honest request of the same prompt afterwards equals the reference.
  auto forged = std::make_shared<KvHandoff>(*handoff);
  for (size_t i = 0; i < forged->kv.size(); i += 2) forged->kv[i] = 0x3c;
  Request f = r;
  f.request_type = RequestType::kGenerationOnly;
  f.context_phase = forged;
  auto fid = gen->Enqueue(f);
  ASSERT_TRUE(fid.ok()) << fid.status().message();
  Collect(*gen, *fid, false);
  auto hid = gen->Enqueue(r);
  ASSERT_TRUE(hid.ok());
  const Collected honest = Collect(*gen, *hid, false);
  ThreadPool pool(1);
  const std::vector<int32_t> want = GreedyAlone(**model, pool, r.prompt_ids, r.max_tokens);
  ASSERT_FALSE(honest.seqs.empty());
  EXPECT_EQ(
      std::vector<int32_t>(honest.seqs[0].begin() + r.prompt_ids.size(), honest.seqs[0].end()),
      want);
  EXPECT_EQ(honest.finals.back().stats.num_reused_blocks, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace inflight::testing
