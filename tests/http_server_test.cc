// The asynchronous HTTP server on its own (no serving core, no protobuf), so it runs under
// TSan: replies sent from other threads, streams written from a worker while the client
// reads, a client that leaves mid-stream, a reader that falls behind the stream bound, and
// Stop with streams open.
#include "frontends/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "base/serial_worker.h"

namespace inflight::frontends {
namespace {

using std::chrono::milliseconds;

// Plays the engine and the serving threads: every reply is made on another thread.
struct Backend {
  SerialWorker worker;
  std::atomic<int> gone{0};
  std::mutex mu;
  std::string last_gone_reason;

  void Handle(HttpRequest req, std::shared_ptr<HttpReply> reply) {
    reply->OnClientGone([this](const std::string& reason) {
      std::lock_guard<std::mutex> lock(mu);
      last_gone_reason = reason;
      ++gone;
    });
    if (req.path == "/echo") {
      worker.Post([reply, body = req.body] { reply->Send({200, "text/plain", "echo:" + body, {}}); });
      return;
    }
    if (req.path == "/stream") {
      const int n = std::stoi(req.query.empty() ? "100" : req.query);
      std::thread([reply, n] {
        reply->StartStream(200, "text/event-stream");
        for (int i = 0; i < n; ++i) {
          if (!reply->Write("data: " + std::to_string(i) + std::string(1000, 'x') + "\n\n")) break;
          if (n <= 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        reply->Write("data: end\n\n", /*force=*/true);
        reply->EndStream();
      }).detach();
      return;
    }
    reply->Send({404, "text/plain", "no", {}});
  }
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.address = "127.0.0.1";
    o.max_stream_buffer_bytes = 1 << 20;  // more than a whole test stream (200 kB)
    server_ = std::make_unique<HttpServer>(o, [this](HttpRequest r, std::shared_ptr<HttpReply> reply) {
      backend_.Handle(std::move(r), std::move(reply));
    });
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
  }
  void TearDown() override { server_->Stop(milliseconds(100)); }

  Backend backend_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, RepliesMadeOnOtherThreadsReachConcurrentKeepAliveClients) {
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", port_);
      cli.set_keep_alive(true);
      for (int i = 0; i < 25; ++i) {
        const std::string body = std::to_string(c) + "-" + std::to_string(i);
        auto r = cli.Post("/echo", body, "text/plain");
        ok += r && r->status == 200 && r->body == "echo:" + body;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 16 * 25);
}

TEST_F(HttpServerTest, StreamsArriveWholeAndInOrder) {
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port_);
      auto r = cli.Get("/stream?200");
      if (!r || r->status != 200) return;
      size_t pos = 0;
      for (int i = 0; i < 200; ++i) {
        const std::string want = "data: " + std::to_string(i) + "x";
        if (r->body.compare(pos, want.size(), want) != 0) return;
        pos = r->body.find("\n\n", pos) + 2;
      }
      ok += r->body.compare(pos, std::string::npos, "data: end\n\n") == 0;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 8);
}

TEST_F(HttpServerTest, ClientLeavingMidStreamIsNoticedAndTheServerGoesOn) {
  {
    httplib::Client cli("127.0.0.1", port_);
    httplib::Request req;
    req.method = "GET";
    req.path = "/stream?1000";
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    cli.send(req);
  }
  for (int i = 0; i < 200 && backend_.gone == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_GE(backend_.gone, 1);
  httplib::Client cli("127.0.0.1", port_);
  auto r = cli.Post("/echo", "still", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "echo:still");
}

TEST_F(HttpServerTest, ReaderBehindTheStreamBoundIsToldAndCutOff) {
  // A client that sends its request and reads nothing: 1,000,000 events of ~1 kB.
  std::thread client([&] {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(5);
    httplib::Request req;
    req.method = "GET";
    req.path = "/stream?1000000";
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      std::this_thread::sleep_for(milliseconds(500));  // falls behind at once
      return backend_.gone == 0;
    };
    cli.send(req);
  });
  for (int i = 0; i < 500 && backend_.gone == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  client.join();
  ASSERT_GE(backend_.gone, 1);
  std::lock_guard<std::mutex> lock(backend_.mu);
  EXPECT_NE(backend_.last_gone_reason.find("too slowly"), std::string::npos) << backend_.last_gone_reason;
}

TEST_F(HttpServerTest, StopWithOpenStreamsAndIdleConnectionsReturnsPromptly) {
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port_);
      cli.set_read_timeout(10);
      cli.Get("/stream?1000000");
    });
  }
  httplib::Client idle("127.0.0.1", port_);
  idle.set_keep_alive(true);
  ASSERT_TRUE(idle.Post("/echo", "x", "text/plain"));
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop(milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
  for (auto& t : clients) t.join();
  EXPECT_EQ(server_->num_connections(), 0);
}

}  // namespace
}  // namespace inflight::frontends
