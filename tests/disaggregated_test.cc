// Disaggregated serving in the engine: a context-only executor hands each request's prompt
// K/V to a generation-only executor (kvcache/kv_handoff.h), and the pair gives exactly the
// outputs of one aggregated executor for parallel_test's in-flight scenario (greedy, streamed,
// seeded sampling, n = 2, beams, a shared prefix, chunked prompts, LoRA), on a dense and a MoE
// model. A hand-off that is corrupt, truncated or for another prompt, salt or model is
// refused, and imported K/V is never offered to other requests.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine_test_util.h"
#include "kvcache/kv_handoff_shm.h"
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
    testing::HeldStream held;  // the engine waits for this thread between tokens
    longer.output = held.stream;
    auto id = gen->Enqueue(longer);
    ASSERT_TRUE(id.ok());
    std::vector<int32_t> streamed;
    FinishReason finish = FinishReason::kNotFinished;
    bool final = false, cancelled = false;
    for (int polls = 0; !final && polls < 12000; ++polls) {
      for (Result& r : held.Take(std::chrono::milliseconds(5))) {
        streamed.insert(streamed.end(), r.output_token_ids.begin(), r.output_token_ids.end());
        if (r.is_final) final = true, finish = r.finish_reason;
      }
      if (streamed.size() >= 5 && !final && !cancelled) {
        gen->Cancel(*id);
        cancelled = true;
      }
      held.Release();
    }
    ASSERT_TRUE(final);
    EXPECT_EQ(finish, FinishReason::kCancelled);
    EXPECT_LT(streamed.size(), 300u);
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

// The same-host transport: a segment is read once, only by its descriptor, and nothing a
// client names or plants in the folder (another name, a link, a FIFO, a wrong size) is read.
TEST(KvHandoffShm, ASegmentIsReadOnceByItsDescriptorAndNothingElseIs) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kv_handoff_shm_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto opened = KvHandoffShm::Open(dir.string(), 60000, 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  KvHandoffShm& shm = **opened;
  std::vector<uint8_t> bytes(5000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  auto written = shm.Write(bytes.data(), bytes.size());
  ASSERT_TRUE(written.ok() && written->has_value());
  const std::string desc = **written;
  ASSERT_EQ(desc.size(), kKvHandoffShmDescriptorBytes);
  const auto* d = reinterpret_cast<const uint8_t*>(desc.data());
  EXPECT_TRUE(IsKvHandoffShmDescriptor(d, desc.size()));
  EXPECT_FALSE(IsKvHandoffShmDescriptor(bytes.data(), bytes.size()));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(fs::status(e).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(shm.Sweep(), 5000);
  auto taken = shm.Take(d, desc.size());
  ASSERT_TRUE(taken.ok()) << taken.status().message();
  EXPECT_EQ(std::vector<uint8_t>(taken->data(), taken->data() + taken->size()), bytes);
  EXPECT_TRUE(fs::is_empty(dir));
  auto again = shm.Take(d, desc.size());
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound);
  EXPECT_NE(again.status().message().find("is gone"), std::string::npos);

  // Malformed descriptors: short, a name that is not hex (a path), a size beyond the bound.
  EXPECT_EQ(shm.Take(d, desc.size() - 1).status().code(), StatusCode::kInvalidArgument);
  std::string path_name = desc;
  std::memcpy(&path_name[16], "../../../../../../../etc/passwd", 31);
  EXPECT_NE(shm.Take(reinterpret_cast<const uint8_t*>(path_name.data()), path_name.size())
                .status()
                .message()
                .find("malformed"),
            std::string::npos);
  std::string huge = desc;
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(&huge[8], &big, sizeof big);
  EXPECT_EQ(shm.Take(reinterpret_cast<const uint8_t*>(huge.data()), huge.size()).status().code(),
            StatusCode::kInvalidArgument);

  // Planted under a descriptor's name: a link to another file, a FIFO (no hang), a file of
  // another size than announced.
  auto name_of = [](const std::string& desc) { return "ifkv-" + desc.substr(16); };
  auto planted = [&](auto plant) {
    auto w = shm.Write(bytes.data(), bytes.size());
    EXPECT_TRUE(w.ok() && w->has_value());
    const std::string dsc = **w;
    const fs::path f = dir / name_of(dsc);
    fs::remove(f);
    plant(f);
    auto t = shm.Take(reinterpret_cast<const uint8_t*>(dsc.data()), dsc.size());
    fs::remove(f);
    return t.ok() ? std::string("read") : t.status().message();
  };
  const fs::path secret = dir.parent_path() / ("kv_handoff_secret_" + std::to_string(getpid()));
  { std::ofstream(secret) << std::string(5000, 's'); }
  EXPECT_NE(planted([&](const fs::path& f) { fs::create_symlink(secret, f); }).find("is a link"),
            std::string::npos);
  EXPECT_NE(planted([&](const fs::path& f) {
              ASSERT_EQ(mkfifo(f.c_str(), 0600), 0);
            }).find("not the file its descriptor announces"),
            std::string::npos);
  EXPECT_NE(planted([&](const fs::path& f) {
              fs::create_hard_link(secret, f);
            }).find("not the file its descriptor announces"),
            std::string::npos);
  EXPECT_NE(planted([&](const fs::path& f) { std::ofstream(f) << "short"; }).find("announces"),
            std::string::npos);
  fs::remove(secret);

  // Bounded: past max_bytes of live segments Write declines (the caller sends inline).
  std::vector<uint8_t> big_bytes(400 << 10, 1);
  std::vector<std::string> kept;
  for (int i = 0; i < 2; ++i) {
    auto w = shm.Write(big_bytes.data(), big_bytes.size());
    ASSERT_TRUE(w.ok() && w->has_value());
    kept.push_back(**w);
  }
  auto full = shm.Write(big_bytes.data(), big_bytes.size());
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->has_value());

  // Segments nobody took expire (here aged by hand): swept, and their descriptors are gone.
  for (const auto& e : fs::directory_iterator(dir))
    fs::last_write_time(e.path(), fs::last_write_time(e.path()) - std::chrono::minutes(5));
  EXPECT_EQ(shm.Sweep(), 0);
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_EQ(
      shm.Take(reinterpret_cast<const uint8_t*>(kept[0].data()), kept[0].size()).status().code(),
      StatusCode::kNotFound);
  auto room = shm.Write(big_bytes.data(), big_bytes.size());
  ASSERT_TRUE(room.ok());
  EXPECT_TRUE(room->has_value());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inflight::testing
