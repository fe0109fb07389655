// The KV cache's disk tier: the store on its own (write behind, read back, restart, a bounded
// size, a full write queue), its reader (chains read on a thread of its own, staged within a
// bound) and under the executor (a prompt's blocks written as they fill,
// read back by a new executor over the same directory with the same greedy output, never
// across cache salts), with a store full of corrupted, truncated, renamed, foreign and stray
// files survived with every output still correct.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "base/thread_pool.h"
#include "engine/executor.h"
#include "engine_test_util.h"
#include "kvcache/kv_disk_reader.h"
#include "kvcache/kv_disk_store.h"
#include "model/model.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("inflight_kv_disk_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  return p;
}

KvDiskStoreConfig StoreConfig(const fs::path& dir, int64_t max_bytes = 1 << 20) {
  KvDiskStoreConfig c;
  c.path = dir.string();
  c.max_bytes = max_bytes;
  c.fingerprint = "test model";
  c.tokens_per_block = 4;
  c.block_bytes = 1000;
  return c;
}

std::vector<uint8_t> Bytes(uint8_t seed) {
  std::vector<uint8_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// The block files under `dir` (the store keeps them in a folder per fingerprint).
std::vector<fs::path> BlockFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".kvb") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(KvDiskStoreTest, WritesBehindReadsBackAndSurvivesAReopen) {
  const fs::path dir = TempDir("store");
  const int32_t tokens[4] = {1, 2, 3, 4}, other[4] = {1, 2, 3, 5};
  {
    auto store = KvDiskStore::Open(StoreConfig(dir));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (uint64_t k = 1; k <= 5; ++k) EXPECT_TRUE((*store)->Write(k, k - 1, tokens, Bytes(k)));
    EXPECT_FALSE((*store)->Write(3, 2, tokens, Bytes(3))) << "already queued or stored";
    (*store)->Flush();
    EXPECT_EQ((*store)->stats().written, 5);
  }
  auto store = KvDiskStore::Open(StoreConfig(dir));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().files, 5);
  std::vector<uint8_t> out(1000);
  for (uint64_t k = 1; k <= 5; ++k) {
    ASSERT_TRUE((*store)->Read(k, k - 1, tokens, out.data())) << k;
    EXPECT_EQ(out, Bytes(k));
  }
  // The key must be the block of these tokens after this parent.
  EXPECT_FALSE((*store)->Read(2, 7, tokens, out.data()));
  EXPECT_FALSE((*store)->Read(9, 8, tokens, out.data()));
  EXPECT_FALSE((*store)->Read(4, 3, other, out.data()));  // a collision is never trusted
  // Another fingerprint (another model, KV type or layout) sharing the path keeps its own
  // folder: it reads nothing of ours and deletes nothing.
  KvDiskStoreConfig foreign = StoreConfig(dir);
  foreign.fingerprint = "another model";
  auto other_store = KvDiskStore::Open(foreign);
  ASSERT_TRUE(other_store.ok());
  EXPECT_EQ((*other_store)->stats().files, 0);
  EXPECT_FALSE((*other_store)->Read(1, 0, tokens, out.data()));
  EXPECT_EQ(BlockFiles(dir).size(), 4u);  // the one read above as "another prefix" went
  fs::remove_all(dir);
}

TEST(KvDiskStoreTest, StaysUnderItsSizeLeastRecentlyUsedFirst) {
  const fs::path dir = TempDir("bound");
  const int32_t tokens[4] = {1, 2, 3, 4};
  const int64_t file = 64 + 16 + 1000;
  auto store = KvDiskStore::Open(StoreConfig(dir, 3 * file));
  ASSERT_TRUE(store.ok());
  std::vector<uint8_t> out(1000);
  for (uint64_t k = 1; k <= 3; ++k) (*store)->Write(k, 0, tokens, Bytes(k));
  (*store)->Flush();
  ASSERT_TRUE((*store)->Read(1, 0, tokens, out.data()));  // 1 is now the most recent
  for (uint64_t k = 4; k <= 5; ++k) (*store)->Write(k, 0, tokens, Bytes(k));
  (*store)->Flush();
  const KvDiskStats s = (*store)->stats();
  EXPECT_EQ(s.files, 3);
  EXPECT_LE(s.bytes, 3 * file);
  EXPECT_EQ(s.evicted, 2);
  EXPECT_TRUE((*store)->Contains(1));
  EXPECT_FALSE((*store)->Contains(2));
  EXPECT_FALSE((*store)->Contains(3));
  EXPECT_EQ(BlockFiles(dir).size(), 3u);
  fs::remove_all(dir);
}

TEST(KvDiskStoreTest, AFullWriteQueueDropsBlocksInsteadOfWaiting) {
  const fs::path dir = TempDir("queue");
  KvDiskStoreConfig c = StoreConfig(dir, 1 << 30);
  c.max_queued_bytes = 2000;  // two blocks
  auto store = KvDiskStore::Open(c);
  ASSERT_TRUE(store.ok());
  const int32_t tokens[4] = {1, 2, 3, 4};
  int accepted = 0;
  for (uint64_t k = 1; k <= 200; ++k) accepted += (*store)->Write(k, 0, tokens, Bytes(k));
  (*store)->Flush();
  const KvDiskStats s = (*store)->stats();
  EXPECT_EQ(s.written, accepted);
  EXPECT_EQ(s.dropped, 200 - accepted);
  EXPECT_GT(s.dropped, 0) << "200 writes in a row never filled a two-block queue";
  fs::remove_all(dir);
}

// Waits (at most 10 s) until the reader has the chain read.
bool WaitReady(KvDiskReader& reader, const std::vector<KvDiskReader::Block>& chain) {
  for (int i = 0; i < 1000; ++i) {
    if (reader.Ready(chain)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A chain of n blocks written to the store (block i: key 100 + i after key 99 + i, tokens
// 4i..4i+3, bytes Bytes(i)).
std::vector<KvDiskReader::Block> WriteChain(KvDiskStore& store, int n) {
  std::vector<KvDiskReader::Block> chain;
  for (int i = 0; i < n; ++i) {
    KvDiskReader::Block b{100u + i, 99u + i, {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3}};
    EXPECT_TRUE(store.Write(b.key, b.parent, b.tokens.data(), Bytes(static_cast<uint8_t>(i))));
    chain.push_back(std::move(b));
  }
  store.Flush();
  return chain;
}

std::vector<uint8_t> TakeBlock(KvDiskReader& reader, const KvDiskReader::Block& b) {
  return reader.Take(b.key, b.parent, b.tokens.data());
}

TEST(KvDiskReaderTest, ReadsAChainOnItsOwnThreadAndHandsEachBlockOverOnce) {
  const fs::path dir = TempDir("reader");
  auto store = KvDiskStore::Open(StoreConfig(dir));
  ASSERT_TRUE(store.ok());
  const std::vector<KvDiskReader::Block> chain = WriteChain(**store, 6);
  std::atomic<int> woken{0};
  KvDiskReader reader(**store, 1 << 20, [&] { ++woken; });
  EXPECT_FALSE(reader.Ready(chain)) << "the first ask only queues the reads";
  ASSERT_TRUE(WaitReady(reader, chain));
  EXPECT_GE(woken.load(), 1) << "the reader wakes whoever waits";
  EXPECT_EQ(reader.stats().read, 6);
  EXPECT_EQ(reader.stats().staged_bytes, 6 * 1000);
  std::vector<int32_t> other = chain[1].tokens;
  other[3] = 77;
  EXPECT_TRUE(reader.Take(chain[1].key, chain[1].parent, other.data()).empty())
      << "another prefix under the same key";
  EXPECT_TRUE(reader.Take(chain[1].key, 5, chain[1].tokens.data()).empty()) << "another parent";
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(TakeBlock(reader, chain[i]), Bytes(static_cast<uint8_t>(i)));
  EXPECT_TRUE(TakeBlock(reader, chain[0]).empty()) << "taken once";
  EXPECT_EQ(reader.stats().staged_bytes, 0);
  fs::remove_all(dir);
}

TEST(KvDiskReaderTest, AChainEndsAtABlockThatCannotBeRead) {
  const fs::path dir = TempDir("reader_gap");
  auto store = KvDiskStore::Open(StoreConfig(dir));
  ASSERT_TRUE(store.ok());
  std::vector<KvDiskReader::Block> chain = WriteChain(**store, 5);
  chain[2].tokens[0] = 999;  // block 2 holds another prefix than the one asked for
  KvDiskReader reader(**store, 1 << 20, nullptr);
  ASSERT_TRUE(WaitReady(reader, chain)) << "a failed read ends the chain: it is ready";
  EXPECT_EQ(TakeBlock(reader, chain[0]), Bytes(0));
  EXPECT_EQ(TakeBlock(reader, chain[1]), Bytes(1));
  EXPECT_TRUE(TakeBlock(reader, chain[2]).empty());
  EXPECT_EQ(reader.stats().failed, 1);
  fs::remove_all(dir);
}

TEST(KvDiskReaderTest, ChainsPastTheRoomWaitForIt) {
  const fs::path dir = TempDir("reader_room");
  auto store = KvDiskStore::Open(StoreConfig(dir));
  ASSERT_TRUE(store.ok());
  const std::vector<KvDiskReader::Block> all = WriteChain(**store, 8);
  // Room for 4 blocks: a chain stages at most 2; two chains fill it, a third waits.
  KvDiskReader reader(**store, 4 * 1000, nullptr);
  EXPECT_EQ(reader.max_blocks(), 2);
  const std::vector<KvDiskReader::Block> a(all.begin(), all.begin() + 3),
      b(all.begin() + 3, all.begin() + 6), c(all.begin() + 6, all.end());
  ASSERT_TRUE(WaitReady(reader, a));
  ASSERT_TRUE(WaitReady(reader, b));
  EXPECT_EQ(reader.stats().read, 4) << "each chain cut to its first 2 blocks";
  EXPECT_FALSE(reader.Ready(c));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(reader.Ready(c)) << "staged blocks not yet taken are kept for their chains";
  EXPECT_LE(reader.stats().staged_bytes, 4 * 1000);
  EXPECT_EQ(TakeBlock(reader, all[0]), Bytes(0));
  EXPECT_EQ(TakeBlock(reader, all[1]), Bytes(1));
  ASSERT_TRUE(WaitReady(reader, c)) << "taking a chain's blocks makes room for the next";
  EXPECT_EQ(TakeBlock(reader, all[6]), Bytes(6));
  // A block larger than the whole room is still read, one at a time.
  KvDiskReader tiny(**store, 10, nullptr);
  ASSERT_TRUE(WaitReady(tiny, a));
  EXPECT_EQ(TakeBlock(tiny, all[0]), Bytes(0));
  fs::remove_all(dir);
}

class KvDiskExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(testing::WriteTinyModel("inflight_kv_disk_test"));
    auto m = Model::Load(*path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    fs::remove(*path_);
    delete path_;
  }

  static ExecutorConfig Config(const fs::path& dir, int64_t disk_bytes = 64 << 20) {
    ExecutorConfig c;
    c.tokens_per_block = 16;
    c.max_tokens_in_paged_kv_cache = 4096;
    c.enable_kv_cache_reuse = true;
    c.num_threads = 2;
    c.kv_cache_disk_path = dir.string();
    c.kv_cache_disk_bytes = disk_bytes;
    c.kv_cache_disk_fingerprint = "tiny test model";
    return c;
  }

  // Runs one greedy request on a new executor over `dir` (of `model`, else the tiny model);
  // its output ids and stats.
  static std::pair<std::vector<int32_t>, RequestStats> Run(const ExecutorConfig& c,
                                                           const std::vector<int32_t>& prompt,
                                                           uint64_t salt = 0,
                                                           KvDiskStats* disk = nullptr,
                                                           const Model* model = nullptr) {
    auto e = Executor::Create(model ? *model : *model_, c);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return {};
    Request r;
    r.prompt_ids = prompt;
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    r.cache_salt = salt;
    auto id = (*e)->Enqueue(std::move(r));
    EXPECT_TRUE(id.ok());
    std::vector<Result> rs = testing::CollectResults(**e, *id);
    EXPECT_FALSE(rs.empty());
    (*e)->Shutdown();  // flushes the disk tier
    if (disk) *disk = *(*e)->KvDiskStatistics();
    return {rs.back().output_token_ids, rs.back().stats};
  }

  static std::vector<int32_t> Prompt(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (auto& t : p) t = static_cast<int32_t>(3 + rng() % 250);
    return p;
  }

  static inline Model* model_ = nullptr;
  static inline ThreadPool* pool_ = nullptr;
  static inline std::string* path_ = nullptr;
};

TEST_F(KvDiskExecutorTest, ANewExecutorReadsThePromptBackFromDisk) {
  const fs::path dir = TempDir("executor");
  const std::vector<int32_t> prompt = Prompt(300, 1);
  const std::vector<int32_t> alone = testing::GreedyAlone(*model_, *pool_, prompt, 8);
  KvDiskStats disk;
  auto [cold, cold_stats] = Run(Config(dir), prompt, 0, &disk);
  EXPECT_EQ(cold, alone);
  EXPECT_EQ(cold_stats.num_disk_reused_blocks, 0);
  EXPECT_EQ(disk.written, 300 / 16);  // the prompt's full blocks
  // A restart: the pool is empty, the disk holds the prompt's blocks.
  auto [warm, warm_stats] = Run(Config(dir), prompt, 0, &disk);
  EXPECT_EQ(warm, alone);
  EXPECT_EQ(warm_stats.num_disk_reused_blocks, 299 / 16);  // the last token is recomputed
  EXPECT_EQ(warm_stats.num_reused_blocks, 299 / 16);
  EXPECT_EQ(disk.hits, 299 / 16);
  // Another tenant's salt never finds them.
  auto [salted, salted_stats] = Run(Config(dir), prompt, 12345, &disk);
  EXPECT_EQ(salted, alone);
  EXPECT_EQ(salted_stats.num_disk_reused_blocks, 0);
  // A prompt sharing the first 200 tokens reads those back and computes the rest.
  std::vector<int32_t> branch(prompt.begin(), prompt.begin() + 200);
  for (int32_t t : Prompt(60, 2)) branch.push_back(t);
  auto [branched, branch_stats] = Run(Config(dir), branch);
  EXPECT_EQ(branched, testing::GreedyAlone(*model_, *pool_, branch, 8));
  EXPECT_EQ(branch_stats.num_disk_reused_blocks, 200 / 16);
  fs::remove_all(dir);
}

// A prefix found on disk is read while the other sequences keep running: the request waits
// for its reads (a step counts it as waiting for them while another sequence decodes) and is
// admitted with the blocks read back, its output that of a cold run.
TEST_F(KvDiskExecutorTest, APrefixIsReadFromDiskWhileTheOthersRun) {
  const fs::path dir = TempDir("async");
  const std::vector<int32_t> prompt = Prompt(300, 4), other = Prompt(40, 5);
  const std::vector<int32_t> alone = testing::GreedyAlone(*model_, *pool_, prompt, 8);
  EXPECT_EQ(Run(Config(dir), prompt).first, alone);  // writes the prompt's blocks
  auto e = Executor::Create(*model_, Config(dir));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto request = [](const std::vector<int32_t>& p, int32_t max_tokens) {
    Request r;
    r.prompt_ids = p;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.exclude_input_in_output = true;
    return r;
  };
  // A decodes for as long as the context allows (it is cancelled once B is done).
  const int32_t long_run = model_->config().context_length - static_cast<int32_t>(other.size());
  auto a = (*e)->Enqueue(request(other, long_run));
  ASSERT_TRUE(a.ok());
  std::vector<IterationStats> steps;
  auto decoding = [&] {
    for (const IterationStats& s : steps)
      if (s.num_generation_tokens > 0) return true;
    return false;
  };
  for (int i = 0; i < 1000 && !decoding(); ++i) {
    for (IterationStats& s : (*e)->GetLatestIterationStats()) steps.push_back(std::move(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(decoding());
  auto b = (*e)->Enqueue(request(prompt, 8));
  ASSERT_TRUE(b.ok());
  const std::vector<Result> rb = testing::CollectResults(**e, *b);
  ASSERT_FALSE(rb.empty());
  EXPECT_EQ(rb.back().output_token_ids, alone);
  EXPECT_EQ(rb.back().stats.num_disk_reused_blocks, 299 / 16);
  for (IterationStats& s : (*e)->GetLatestIterationStats()) steps.push_back(std::move(s));
  int waiting_beside_decode = 0;
  for (const IterationStats& s : steps)
    waiting_beside_decode += s.waiting_for_kv_disk_reads > 0 && s.num_generation_tokens > 0;
  EXPECT_GE(waiting_beside_decode, 1) << "steps that decoded while the prefix was being read";
  (*e)->Cancel(*a);
  const std::vector<Result> ra = testing::CollectResults(**e, *a);
  ASSERT_FALSE(ra.empty());
  EXPECT_LT(ra.back().output_token_ids.size(), static_cast<size_t>(long_run)) << "A still ran";
  testing::ExpectNoKvLeaks(**e);
  (*e)->Shutdown();
  fs::remove_all(dir);
}

TEST_F(KvDiskExecutorTest, AStoreOfDamagedFilesIsSurvivedWithCorrectOutputs) {
  const fs::path dir = TempDir("damaged");
  const std::vector<int32_t> prompt = Prompt(400, 3);
  const std::vector<int32_t> alone = testing::GreedyAlone(*model_, *pool_, prompt, 8);
  EXPECT_EQ(Run(Config(dir), prompt).first, alone);
  std::vector<fs::path> files = BlockFiles(dir);
  ASSERT_EQ(files.size(), 400u / 16);
  std::mt19937 rng(9);
  std::shuffle(files.begin(), files.end(), rng);
  // Corrupted (a byte of K/V flipped), truncated, renamed onto another key, emptied.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) - 10));
    f.put('\x5a');
  }
  fs::resize_file(files[1], fs::file_size(files[1]) / 2);
  fs::rename(files[2], files[3]);  // files[3]'s name now holds files[2]'s block
  std::ofstream(files[4], std::ios::trunc).close();
  // Strays: a half-written block a crash left an hour ago, a block-named file of garbage, and
  // noise.
  const fs::path store = files[5].parent_path();
  std::ofstream(store / "00000000000000aa.kvb.1-2.tmp") << "partial";
  fs::last_write_time(store / "00000000000000aa.kvb.1-2.tmp",
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  std::ofstream(store / "00000000000000bb.kvb") << std::string(5000, 'x');
  std::ofstream(store / "notes.txt") << "not a block";
  // Each damaged block is dropped when found (at open, or on its first read, where the
  // checksum fails) and recomputed and written again: by the third run the chain is whole.
  int64_t rejected = 0;
  for (int round = 0; round < 3; ++round) {
    KvDiskStats disk;
    auto [out, stats] = Run(Config(dir), prompt, 0, &disk);
    EXPECT_EQ(out, alone) << "round " << round;
    rejected += disk.rejected;
    if (round == 0) EXPECT_FALSE(fs::exists(store / "00000000000000aa.kvb.1-2.tmp"));
    if (round == 2) EXPECT_EQ(stats.num_disk_reused_blocks, 399 / 16);
  }
  EXPECT_GE(rejected, 5) << "the corrupt, truncated, renamed and empty blocks and the noise";
  EXPECT_TRUE(fs::exists(store / "notes.txt")) << "files that are not blocks are left alone";
  fs::remove_all(dir);
}

TEST_F(KvDiskExecutorTest, TheStoreStaysUnderItsBytes) {
  const fs::path dir = TempDir("small");
  const int64_t block = 64 + 16 * 4 +
                        KvStorage::BytesPerBlock(KvStorageConfig{
                            model_->config().num_layers, 1, 16, model_->config().kv_dim(),
                            DType::kF16, model_->config().head_dim});
  KvDiskStats disk;
  for (uint32_t seed = 10; seed < 14; ++seed)
    Run(Config(dir, 8 * block), Prompt(200, seed), 0, &disk);
  EXPECT_LE(disk.bytes, 8 * block);
  EXPECT_LE(BlockFiles(dir).size(), 8u);
  EXPECT_GT(disk.evicted, 0);
  fs::remove_all(dir);
}

// KV cache events across the tiers: a router replaying the events from a snapshot holds the
// cache's own listing, each block at its level (0 memory, 1 disk): blocks evicted from the
// pool but kept on disk are updated to level 1, not removed, and a restarted executor lists
// what its disk holds.
TEST_F(KvDiskExecutorTest, EventsFollowBlocksAcrossTheTiers) {
  const fs::path dir = TempDir("events");
  ExecutorConfig c = Config(dir);
  c.kv_event_buffer_size = 100000;
  c.max_tokens_in_paged_kv_cache = 16 * 40;  // 40 blocks: five 300-token prompts evict
  std::map<uint64_t, int32_t> router;        // block hash -> cache level
  auto apply = [&](const KvCacheEvent& e) {
    if (e.type == KvCacheEvent::Type::kRemoved)
      router.erase(e.block_hash);
    else
      router[e.block_hash] = e.cache_level;
  };
  auto listing = [](const KvCacheSnapshot& s) {
    std::map<uint64_t, int32_t> m;
    for (const KvCacheEvent& b : s.blocks) m[b.block_hash] = b.cache_level;
    return m;
  };
  int updated = 0;
  {
    auto e = Executor::Create(*model_, c);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    auto start = (*e)->KvSnapshot(std::chrono::seconds(10));
    ASSERT_TRUE(start.ok());
    router = listing(*start);
    uint64_t cursor = start->last_event_id;
    for (uint32_t seed = 20; seed < 25; ++seed) {
      Request r;
      r.prompt_ids = Prompt(300, seed);
      r.max_tokens = 2;
      r.sampling.temperature = 0;
      auto id = (*e)->Enqueue(std::move(r));
      ASSERT_TRUE(id.ok());
      testing::CollectResults(**e, *id);
      // The writer has the prompt's blocks on disk before the next prompt evicts them (on two
      // busy cores it may otherwise lag behind, and an evicted block not yet written is
      // removed, not updated).
      for (int i = 0; i < 1000 && (*e)->KvDiskStatistics()->written < 300 / 16 * (seed - 19); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer catches up
    auto end = (*e)->KvSnapshot(std::chrono::seconds(10));
    ASSERT_TRUE(end.ok());
    auto read = (*e)->KvEvents(cursor, 1000000);
    ASSERT_TRUE(read.ok());
    ASSERT_FALSE(read->gap);
    for (const KvCacheEvent& ev : read->events) {
      if (ev.id > end->last_event_id) break;
      updated += ev.type == KvCacheEvent::Type::kUpdated;
      apply(ev);
    }
    EXPECT_EQ(router, listing(*end));
    int on_disk_only = 0;
    for (const auto& [h, level] : listing(*end)) on_disk_only += level == 1;
    EXPECT_GT(updated, 0) << "no evicted block was kept on disk";
    EXPECT_GT(on_disk_only, 0);
  }
  // A restart: the listing holds what the disk holds, at level 1.
  auto e = Executor::Create(*model_, c);
  ASSERT_TRUE(e.ok());
  auto start = (*e)->KvSnapshot(std::chrono::seconds(10));
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->blocks.size(), BlockFiles(dir).size());
  for (const KvCacheEvent& b : start->blocks) EXPECT_EQ(b.cache_level, 1);
  std::printf("%d blocks updated to the disk tier; %zu blocks listed after the restart\n", updated,
              start->blocks.size());
  fs::remove_all(dir);
}

// Models with sliding-window layers: a file holds the block's K/V of every layer, and a prefix
// read back after a restart gets the window group's blocks its window sees from the same
// files, with the cold run's output.
TEST_F(KvDiskExecutorTest, WindowedModelsReadTheirPrefixBackAfterARestart) {
  for (const std::string name : {"gemma3-f16", "gpt-oss-f16"}) {
    SCOPED_TRACE(name);
    const std::string path = testing::SharedDir() + "/golden/arch/" + name + ".gguf";
    REQUIRE_SHARED_FILE(path);
    auto model = Model::Load(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const std::vector<int32_t> prompt = Prompt(300, 7);  // past every window (64 and 32)
    const std::vector<int32_t> alone = testing::GreedyAlone(**model, *pool_, prompt, 8);
    const fs::path dir = TempDir("window_" + name);
    ExecutorConfig c = Config(dir, 256 << 20);
    c.kv_cache_disk_fingerprint = name;
    for (int run = 0; run < 2; ++run) {
      auto [out, stats] = Run(c, prompt, 0, nullptr, model->get());
      EXPECT_EQ(out, alone) << "run " << run;
      EXPECT_EQ(stats.num_disk_reused_blocks, run == 0 ? 0 : 299 / 16) << "run " << run;
    }
    fs::remove_all(dir);
  }
}

TEST_F(KvDiskExecutorTest, BadDiskConfigurationsAreRefused) {
  ExecutorConfig c = Config(TempDir("bad"));
  c.kv_cache_disk_bytes = 0;
  EXPECT_FALSE(Executor::Create(*model_, c).ok());
  c = Config("/proc/inflight_cannot_write_here");
  auto e = Executor::Create(*model_, c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("kv_cache_disk_path"), std::string::npos);
}

}  // namespace
}  // namespace inflight
