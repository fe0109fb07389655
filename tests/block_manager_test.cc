// KV block manager: scripted scenarios with exact block ids, reference counts and eviction
// order, then a randomized run of 10^5 operations checking every invariant after each.
#include "kvcache/block_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace inflight {
namespace {

std::vector<int32_t> Tokens(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

TEST(BlockManager, AllocatesLowestIdsFirstAndCountsExactly) {
  KvBlockManager m({4, 2, false});
  EXPECT_EQ(*m.Allocate(), 0);
  EXPECT_EQ(*m.Allocate(), 1);
  EXPECT_EQ(m.counts().used, 2);
  EXPECT_EQ(m.counts().free, 2);
  EXPECT_EQ(*m.Allocate(), 2);
  EXPECT_EQ(*m.Allocate(), 3);
  EXPECT_FALSE(m.Allocate().has_value());  // out of blocks is a value, not an error
  m.Release({1});
  EXPECT_EQ(m.counts().free, 1);
  EXPECT_EQ(*m.Allocate(), 1);
  m.Release({0, 1, 2, 3});
  EXPECT_EQ(m.counts().free, 4);
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, ReusesCommittedPrefixAndSharesByReferenceCount) {
  KvBlockManager m({8, 4, true});
  const std::vector<int32_t> prompt = Tokens(100, 10);  // two full blocks + 2 tokens
  // Sequence A computes it: blocks 0, 1, 2; commits the two full ones.
  std::vector<int32_t> a = {*m.Allocate(), *m.Allocate(), *m.Allocate()};
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  const uint64_t k0 =
      m.Commit(a[0], KvBlockManager::kRootKey, prompt.data(), kDefaultRetentionPriority);
  m.Commit(a[1], k0, prompt.data() + 4, kDefaultRetentionPriority);
  // Sequence B with the same prompt gets A's two full blocks, shared.
  std::vector<int32_t> b = m.AcquirePrefix(prompt.data(), prompt.size(), 100);
  EXPECT_EQ(b, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.RefCount(0), 2);
  EXPECT_EQ(m.RefCount(1), 2);
  EXPECT_EQ(m.num_reused_blocks(), 2);
  // A different second block only matches the first.
  std::vector<int32_t> other = prompt;
  other[5] = 7;
  std::vector<int32_t> c = m.AcquirePrefix(other.data(), other.size(), 100);
  EXPECT_EQ(c, (std::vector<int32_t>{0}));
  EXPECT_EQ(m.RefCount(0), 3);
  // max_blocks caps the match (the last prompt token must always be recomputed).
  std::vector<int32_t> d = m.AcquirePrefix(prompt.data(), 8, 1);
  EXPECT_EQ(d, (std::vector<int32_t>{0}));
  m.Release(d);
  m.Release(c);
  m.Release(b);
  m.Release(a);
  // Both committed blocks are cached, block 2 is free again.
  EXPECT_EQ(m.counts().cached, 2);
  EXPECT_EQ(m.counts().free, 6);
  EXPECT_EQ(m.counts().used, 0);
  EXPECT_TRUE(m.IsCached(0));
  EXPECT_FALSE(m.IsCached(2));
  // A later request still finds them.
  std::vector<int32_t> e = m.AcquirePrefix(prompt.data(), prompt.size(), 100);
  EXPECT_EQ(e, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.counts().cached, 0);
  m.Release(e);
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, SaltedChainsShareNothingAcrossSaltsAndEverythingWithin) {
  KvBlockManager m({8, 4, true});
  const std::vector<int32_t> prompt = Tokens(100, 9);  // two full blocks + 1 token
  const uint64_t salt_a = KvBlockManager::RootKey(0x1234), salt_b = KvBlockManager::RootKey(0x5678);
  ASSERT_NE(salt_a, KvBlockManager::kRootKey);
  ASSERT_NE(salt_a, salt_b);
  EXPECT_EQ(KvBlockManager::RootKey(0), KvBlockManager::kRootKey);
  std::vector<int32_t> a = {*m.Allocate(), *m.Allocate()};
  const uint64_t k0 = m.Commit(a[0], salt_a, prompt.data(), kDefaultRetentionPriority);
  m.Commit(a[1], k0, prompt.data() + 4, kDefaultRetentionPriority);
  // Same salt: the whole prefix. Another salt, or none: nothing, not even a partial block.
  EXPECT_EQ(m.AcquirePrefix(prompt.data(), prompt.size(), 100, salt_a),
            (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(m.AcquirePrefix(prompt.data(), prompt.size(), 100, salt_b).empty());
  EXPECT_TRUE(m.AcquirePrefix(prompt.data(), prompt.size(), 100).empty());
  EXPECT_EQ(m.AcquirePartial(salt_b, prompt.data(), 3), std::make_pair(-1, 0));
  EXPECT_EQ(m.AcquirePartial(KvBlockManager::kRootKey, prompt.data(), 3), std::make_pair(-1, 0));
  const auto [block, len] = m.AcquirePartial(salt_a, prompt.data(), 3);
  EXPECT_EQ(block, 0);
  EXPECT_EQ(len, 3);
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, EvictsFreeBlocksFirstThenLeastRecentlyUsedLeafFirst) {
  KvBlockManager m({4, 2, true});
  const std::vector<int32_t> p = Tokens(1, 4), q = Tokens(50, 4);
  std::vector<int32_t> a = {*m.Allocate(), *m.Allocate()};  // 0, 1
  uint64_t k = m.Commit(a[0], KvBlockManager::kRootKey, p.data(), 35);
  m.Commit(a[1], k, p.data() + 2, 35);
  m.Release(a);                                             // leaf 1 is older than 0
  std::vector<int32_t> b = {*m.Allocate(), *m.Allocate()};  // uncached free blocks first: 2, 3
  EXPECT_EQ(b, (std::vector<int32_t>{2, 3}));
  k = m.Commit(b[0], KvBlockManager::kRootKey, q.data(), 35);
  m.Commit(b[1], k, q.data() + 2, 35);
  m.Release(b);  // order now (oldest first): 1, 0, 3, 2
  EXPECT_EQ(*m.Allocate(), 1);
  EXPECT_EQ(*m.Allocate(), 0);
  EXPECT_EQ(*m.Allocate(), 3);
  // The first block of q is still reusable; p is gone.
  EXPECT_TRUE(m.AcquirePrefix(p.data(), 4, 10).empty());
  EXPECT_EQ(m.AcquirePrefix(q.data(), 4, 10), (std::vector<int32_t>{2}));
  EXPECT_FALSE(m.Allocate().has_value());
  m.Release({1, 0, 3, 2});
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, LowRetentionPriorityIsEvictedFirst) {
  KvBlockManager m({3, 2, true});
  const std::vector<int32_t> hi = Tokens(1, 2), lo = Tokens(9, 2);
  int32_t b0 = *m.Allocate(), b1 = *m.Allocate();
  m.Commit(b0, KvBlockManager::kRootKey, hi.data(), 90);
  m.Commit(b1, KvBlockManager::kRootKey, lo.data(), 10);
  m.Release({b1});  // the low-priority block is released last (most recently used) ...
  m.Release({b0});
  ASSERT_EQ(*m.Allocate(), 2);
  EXPECT_EQ(*m.Allocate(), b1);  // ... yet evicted first
  EXPECT_EQ(m.AcquirePrefix(hi.data(), 2, 1), (std::vector<int32_t>{b0}));
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, DuplicatePrefixIsNotCommittedTwice) {
  KvBlockManager m({4, 2, true});
  const std::vector<int32_t> p = Tokens(3, 2);
  int32_t a = *m.Allocate(), b = *m.Allocate();
  m.Commit(a, KvBlockManager::kRootKey, p.data(), 35);
  m.Commit(b, KvBlockManager::kRootKey, p.data(), 35);  // computed twice at the same time
  EXPECT_TRUE(m.IsCached(a));
  EXPECT_FALSE(m.IsCached(b));
  m.Release({a, b});
  EXPECT_EQ(m.counts().cached, 1);
  EXPECT_EQ(m.counts().free, 3);
  EXPECT_EQ(m.CheckInvariants(), "");
}

TEST(BlockManager, PartialMatchPicksTheLongestChildAndPinsIt) {
  KvBlockManager m({6, 4, true});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {1, 2, 3, 4, 5, 6, 9, 9};
  std::vector<int32_t> ha = {*m.Allocate(), *m.Allocate()}, hb = {*m.Allocate()};
  const uint64_t k0 = m.Commit(ha[0], KvBlockManager::kRootKey, a.data(), 35);
  m.Commit(ha[1], k0, a.data() + 4, 35);                             // child 5 6 7 8
  m.Commit(hb[0], k0, std::vector<int32_t>{5, 9, 9, 9}.data(), 35);  // child 5 9 9 9
  m.Release(ha);
  m.Release(hb);
  const std::vector<int32_t> q = {5, 6, 7, 0};
  auto [blk, len] = m.AcquirePartial(k0, q.data(), 3);
  EXPECT_EQ(blk, ha[1]);
  EXPECT_EQ(len, 3);
  EXPECT_EQ(m.RefCount(blk), 1);  // pinned: not evictable while the copy is pending
  EXPECT_EQ(m.counts().cached, 2);
  EXPECT_EQ(m.AcquirePartial(k0, std::vector<int32_t>{7, 7, 7}.data(), 3).first, -1);
  m.Release({blk});
  EXPECT_EQ(m.CheckInvariants(), "");
  (void)b;
}

TEST(BlockManager, RandomizedOperationsKeepInvariants) {
  KvBlockManager m({64, 4, true});
  std::mt19937 rng(12345);
  std::vector<std::vector<int32_t>> held;  // per live sequence
  std::map<int32_t, int32_t> expected_refs;
  const int kOps = 100000;
  for (int op = 0; op < kOps; ++op) {
    const int kind = rng() % 4;
    if (kind == 0 || held.empty()) {
      // A new sequence over a prompt from a small alphabet of prefixes (so reuse happens).
      const int32_t n = 1 + rng() % 20;
      std::vector<int32_t> prompt(n);
      for (int32_t i = 0; i < n; ++i)
        prompt[i] = (i < 8 ? static_cast<int32_t>(rng() % 2) : static_cast<int32_t>(rng() % 50));
      std::vector<int32_t> blocks = m.AcquirePrefix(prompt.data(), n - 1, 100);
      uint64_t key = KvBlockManager::kRootKey;
      for (size_t i = 0; i < blocks.size(); ++i) key = m.ChainKey(key, prompt.data() + 4 * i);
      bool ok = true;
      for (int32_t pos = static_cast<int32_t>(blocks.size()) * 4; pos < n; pos += 4) {
        auto b = m.Allocate();
        if (!b) {
          ok = false;
          break;
        }
        blocks.push_back(*b);
        if (pos + 4 <= n)
          key = m.Commit(*b, key, prompt.data() + pos, static_cast<int32_t>(rng() % 101));
      }
      if (!ok) {
        m.Release(blocks);
      } else {
        for (int32_t b : blocks) ++expected_refs[b];
        held.push_back(std::move(blocks));
      }
    } else {
      const size_t i = rng() % held.size();
      for (int32_t b : held[i]) --expected_refs[b];
      m.Release(held[i]);
      held.erase(held.begin() + i);
    }
    const std::string err = m.CheckInvariants();
    ASSERT_EQ(err, "") << "after op " << op;
    const BlockCounts c = m.counts();
    ASSERT_EQ(c.free + c.cached + c.used, c.total);
    if (op % 97 == 0) {
      for (const auto& [b, r] : expected_refs) ASSERT_EQ(m.RefCount(b), r) << "block " << b;
    }
  }
  for (auto& h : held) m.Release(h);
  EXPECT_EQ(m.counts().used, 0);
  EXPECT_EQ(m.counts().free + m.counts().cached, 64);
  EXPECT_GT(m.num_reused_blocks(), 1000);
}

// A router's view: start from a snapshot taken mid-run, apply every event after it; the set of
// (hash, parent, tokens) it holds equals the cache's own listing at every checkpoint, under a
// randomized load with evictions. The consumer reads in batches, as a streaming client would.
TEST(KvCacheEvents, ReplayingFromASnapshotReproducesTheCachedBlocks) {
  KvEventLog log(1 << 16);
  KvBlockManager m({48, 4, true});
  m.SetEventLog(&log, 0);
  std::mt19937 rng(77);
  std::vector<std::vector<int32_t>> held;
  using View = std::map<uint64_t, std::pair<uint64_t, std::vector<int32_t>>>;
  auto listing = [&] {
    View v;
    for (const KvCacheEvent& b : m.Snapshot().blocks) v[b.block_hash] = {b.parent_hash, b.tokens};
    return v;
  };
  View router;
  uint64_t cursor = 0;
  bool synced = false;
  int64_t stored = 0, removed = 0;
  for (int op = 0; op < 20000; ++op) {
    if (rng() % 3 != 0 || held.empty()) {
      const int32_t n = 4 + rng() % 16;
      std::vector<int32_t> prompt(n);
      for (int32_t i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>(rng() % (i < 8 ? 2 : 40));
      std::vector<int32_t> blocks = m.AcquirePrefix(prompt.data(), n - 1, 100);
      uint64_t key = KvBlockManager::kRootKey;
      for (size_t i = 0; i < blocks.size(); ++i) key = m.ChainKey(key, prompt.data() + 4 * i);
      bool ok = true;
      for (int32_t pos = static_cast<int32_t>(blocks.size()) * 4; pos + 4 <= n; pos += 4) {
        auto b = m.Allocate();
        if (!b) {
          ok = false;
          break;
        }
        blocks.push_back(*b);
        key = m.Commit(*b, key, prompt.data() + pos, 35);
      }
      if (ok) {
        held.push_back(std::move(blocks));
      } else {
        m.Release(blocks);
      }
    } else {
      const size_t i = rng() % held.size();
      m.Release(held[i]);
      held.erase(held.begin() + i);
    }
    if (op == 5000) {  // the router connects: a snapshot, then the events after it
      const KvCacheSnapshot snap = m.Snapshot();
      router.clear();
      for (const KvCacheEvent& b : snap.blocks) router[b.block_hash] = {b.parent_hash, b.tokens};
      cursor = snap.last_event_id;
      synced = true;
    }
    if (synced && op % 7 == 0) {
      for (;;) {
        KvEventLog::Read r = log.Since(cursor, 64);
        ASSERT_FALSE(r.gap);
        for (const KvCacheEvent& e : r.events) {
          ASSERT_EQ(e.id, cursor + 1) << "ids are dense";
          cursor = e.id;
          if (e.type == KvCacheEvent::Type::kStored) {
            ASSERT_FALSE(router.count(e.block_hash)) << "stored twice";
            router[e.block_hash] = {e.parent_hash, e.tokens};
            ++stored;
          } else {
            ASSERT_EQ(router.erase(e.block_hash), 1u) << "removed a block the router never had";
            ++removed;
          }
        }
        if (r.events.size() < 64) break;
      }
      ASSERT_EQ(router, listing()) << "after op " << op;
    }
  }
  EXPECT_GT(stored, 1000);
  EXPECT_GT(removed, 1000) << "the load evicted";
  for (auto& h : held) m.Release(h);
}

// A consumer that stops reading: the ring keeps its capacity, the rest is dropped and counted,
// and the consumer is told to resync.
TEST(KvCacheEvents, ASlowConsumerLosesEventsNotMemory) {
  KvEventLog log(16);
  KvBlockManager m({8, 2, true});
  m.SetEventLog(&log, 3);
  int32_t tokens[2] = {0, 0};
  for (int i = 0; i < 500; ++i) {
    tokens[0] = i;
    auto b = m.Allocate();
    ASSERT_TRUE(b);
    m.Commit(*b, KvBlockManager::kRootKey, tokens, 35);
    m.Release({*b});
  }
  EXPECT_EQ(log.last_id(), 500u + 492u) << "500 stored, 492 evicted (8 blocks)";
  EXPECT_EQ(log.num_dropped(), log.last_id() - 16);
  KvEventLog::Read r = log.Since(0, 1000);
  EXPECT_TRUE(r.gap);
  ASSERT_EQ(r.events.size(), 16u);
  EXPECT_EQ(r.events.front().id, log.last_id() - 15);
  EXPECT_EQ(r.events.back().id, log.last_id());
  EXPECT_EQ(r.events.back().group, 3);
  EXPECT_FALSE(log.Since(r.last_id - 4, 1000).gap);
  EXPECT_EQ(log.Since(r.last_id - 4, 1000).events.size(), 4u);
  EXPECT_TRUE(log.Since(r.last_id, 1000).events.empty());
}

// A cursor from another log (a reloaded model's ids start again) is a gap, not a wait.
TEST(KvCacheEvents, ACursorPastTheNewestEventIsAGap) {
  KvEventLog log(8);
  for (int i = 0; i < 3; ++i) log.Record(KvCacheEvent{});
  EXPECT_FALSE(log.Since(3, 10).gap);
  EXPECT_FALSE(log.Since(1, 10).gap);
  const KvEventLog::Read r = log.Since(500, 10);
  EXPECT_TRUE(r.gap);
  EXPECT_EQ(r.last_id, 3u);
  EXPECT_TRUE(r.events.empty());
}

}  // namespace
}  // namespace inflight
