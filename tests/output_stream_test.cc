// OutputStream: the one hand-off of results out of the engine. Order, exactly-once delivery
// with a notifying consumer on another thread, the bound on unread output, and the output
// credit that pauses a request whose client is behind. Runs under TSan in CI.
#include "engine/output_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "base/serial_worker.h"

namespace inflight {
namespace {

Result Token(int32_t id, bool final, size_t logits = 0) {
  Result r;
  r.output_token_ids = {id};
  r.is_final = final;
  r.generation_logits.assign(logits, 0.5f);
  return r;
}

TEST(OutputStream, WaitingConsumerGetsEveryResultInOrder) {
  OutputStream s;
  constexpr int kN = 20000;
  std::thread engine([&] {
    for (int i = 0; i < kN; ++i) EXPECT_TRUE(s.Push(Token(i, i == kN - 1)));
  });
  std::vector<int32_t> got;
  while (got.empty() || !s.final_pushed() || s.unread_bytes() > 0) {
    for (Result& r : s.Wait(std::chrono::milliseconds(10))) got.push_back(r.output_token_ids[0]);
  }
  engine.join();
  ASSERT_EQ(got.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(got[i], i);
}

TEST(OutputStream, NotifiedConsumerOnAnotherThreadTakesEachResultOnce) {
  auto s = std::make_shared<OutputStream>();
  SerialWorker consumer;
  std::vector<int32_t> got;  // touched only on the consumer thread
  std::atomic<int> notifications{0};
  std::atomic<bool> done{false};
  s->SetNotify([&, weak = std::weak_ptr<OutputStream>(s)] {
    ++notifications;
    auto stream = weak.lock();
    consumer.Post([&, stream] {
      for (Result& r : stream->Take()) {
        got.push_back(r.output_token_ids[0]);
        if (r.is_final) done = true;
      }
    });
  });
  constexpr int kN = 20000;
  std::thread engine([&] {
    for (int i = 0; i < kN; ++i) s->Push(Token(i, i == kN - 1));
  });
  engine.join();
  while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  consumer.Stop();
  ASSERT_EQ(got.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(got[i], i);
  // A notification per push into an empty stream, not per result.
  EXPECT_LE(notifications.load(), kN);
  EXPECT_GE(notifications.load(), 1);
}

TEST(OutputStream, UnreadOutputPastTheBoundOverflowsButTheFinalResultArrives) {
  OutputStream s(4 * (sizeof(Result) + 4 * 101));  // room for 4 results of 100 logits
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.Push(Token(i, false, 100)));
  EXPECT_FALSE(s.overflowed());
  EXPECT_FALSE(s.Push(Token(4, false, 100)));  // reported once
  EXPECT_TRUE(s.overflowed());
  EXPECT_TRUE(s.Push(Token(5, true)));
  const auto all = s.Take();
  ASSERT_EQ(all.size(), 6u);
  EXPECT_TRUE(all.back().is_final);
  EXPECT_EQ(s.unread_bytes(), 0u);
}

// Unread results count in the request's credit from the push until taken (or, with
// keep_credit, until the consumer releases them once handed on); the credit pauses past its
// bound, calls its listener when a release ends the pause, and stalls after max_stall paused.
TEST(OutputStream, CreditCountsUnreadResultsAndPausesPastItsBound) {
  const int64_t one = static_cast<int64_t>(OutputStream::ResultBytes(Token(0, false, 1000)));
  auto credit = std::make_shared<OutputCredit>(2 * one, std::chrono::milliseconds(50));
  std::atomic<int> resumed{0};
  credit->SetOnResume([&] { ++resumed; });
  OutputStream s;
  s.SetCredit(credit);
  EXPECT_TRUE(s.Push(Token(0, false, 1000)));
  EXPECT_TRUE(s.Push(Token(1, false, 1000)));
  EXPECT_EQ(credit->held(), 2 * one);
  EXPECT_FALSE(credit->paused());
  EXPECT_TRUE(s.Push(Token(2, false, 1000)));
  EXPECT_TRUE(credit->paused());
  EXPECT_FALSE(credit->stalled(OutputCredit::Clock::now()));
  EXPECT_TRUE(credit->stalled(OutputCredit::Clock::now() + std::chrono::milliseconds(100)));
  // Taken but kept: still counted until the consumer has handed the results on.
  EXPECT_EQ(s.Take(/*keep_credit=*/true).size(), 3u);
  EXPECT_TRUE(credit->paused());
  EXPECT_EQ(resumed, 0);
  credit->Release(3 * one);
  EXPECT_EQ(credit->held(), 0);
  EXPECT_FALSE(credit->paused());
  EXPECT_EQ(resumed, 1);
  // A plain Take releases at once.
  for (int i = 0; i < 3; ++i) s.Push(Token(i, false, 1000));
  EXPECT_TRUE(credit->paused());
  EXPECT_EQ(s.Take().size(), 3u);
  EXPECT_EQ(credit->held(), 0);
  EXPECT_EQ(resumed, 2);
}

}  // namespace
}  // namespace inflight
