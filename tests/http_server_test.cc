// The asynchronous HTTP server on its own (no serving core, no protobuf), so it runs under
// TSan: replies sent from other threads, streams written from a worker while the client
// reads, a client that leaves mid-stream, a reader that falls behind the stream bound, and
// Stop with streams open.
#include "frontends/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
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
      worker.Post([reply, body = req.body] {
        reply->Send({200, "text/plain", "echo:" + body, {}});
      });
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
    server_ =
        std::make_unique<HttpServer>(o, [this](HttpRequest r, std::shared_ptr<HttpReply> reply) {
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
  EXPECT_NE(backend_.last_gone_reason.find("too slowly"), std::string::npos)
      << backend_.last_gone_reason;
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

// The same server over TLS (certificates made by openssl now), driven by curl: keep-alive
// requests from several clients at once, a stream read whole, and a client that leaves
// mid-stream (its close_notify and FIN arrive while a reply is pending).
class HttpsServerTest : public HttpServerTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("inflight_https_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const std::string cmd = "cd " + dir_.string() +
                            " && openssl req -x509 -newkey ec -pkeyopt "
                            "ec_paramgen_curve:prime256v1 -nodes -keyout key.pem"
                            " -out cert.pem -subj /CN=localhost -addext "
                            "subjectAltName=IP:127.0.0.1 -days 1 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  void SetUp() override {
    HttpServerOptions o;
    o.address = "127.0.0.1";
    o.tls.cert_file = (dir_ / "cert.pem").string();
    o.tls.key_file = (dir_ / "key.pem").string();
    server_ =
        std::make_unique<HttpServer>(o, [this](HttpRequest r, std::shared_ptr<HttpReply> reply) {
          backend_.Handle(std::move(r), std::move(reply));
        });
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
  }
  std::string Curl(const std::string& args) {
    const std::string cmd =
        "curl -s --max-time 60 --cacert " + (dir_ / "cert.pem").string() + " " + args;
    std::string out;
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) return out;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    pclose(f);
    return out;
  }
  std::string Url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(port_) + path;
  }
  static inline std::filesystem::path dir_;
};

TEST_F(HttpsServerTest, KeepAliveClientsStreamsAndDisconnectsOverTls) {
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      // Five requests on one connection (curl reuses it for the URLs it is given).
      // (--next resets curl's options, so each part names the CA again.)
      const std::string ca = " --cacert " + (dir_ / "cert.pem").string();
      std::string args;
      for (int i = 0; i < 5; ++i)
        args += " -d c" + std::to_string(c) + "i" + std::to_string(i) + " " + Url("/echo") +
                " --next -s" + ca;
      args += " " + Url("/stream?50");
      const std::string out = Curl(args);
      int echoes = 0;
      for (int i = 0; i < 5; ++i)
        echoes +=
            out.find("echo:c" + std::to_string(c) + "i" + std::to_string(i)) != std::string::npos;
      ok += echoes == 5 && out.find("data: 49x") != std::string::npos &&
            out.find("data: end") != std::string::npos;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 4);
  // A plaintext request gets no HTTP answer.
  httplib::Client plain("127.0.0.1", port_);
  auto r = plain.Get("/echo");
  EXPECT_FALSE(r && r->status == 200);
  // A client that leaves mid-stream.
  const int before = backend_.gone;
  Curl(Url("/stream?100000") + " | head -c 20000 > /dev/null");
  for (int i = 0; i < 300 && backend_.gone == before; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_GT(backend_.gone, before);
  EXPECT_EQ(Curl("-d still " + Url("/echo")), "echo:still");
}

}  // namespace
}  // namespace inflight::frontends
