// deploy/kubernetes against the Kubernetes API schemas and the server itself
// (tools/oracle/check_k8s_manifests.mjs): the autoscaler's series must be one the demo server's
// /metrics page exports. Broken copies of the manifests must fail the same check.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "server_harness.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

std::string Checker() { return testing::SourceDir() + "/tools/oracle/check_k8s_manifests.mjs"; }

int RunChecker(const std::string& dir, const std::string& metrics, std::string* output,
               const std::string& server = "") {
  const std::string out = dir + ".out";
  const std::string cmd = "node " + Checker() + " " + dir +
                          (metrics.empty() ? "" : " --metrics " + metrics) +
                          (server.empty() ? "" : " --server " + server) + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  output->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(out);
  return rc;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class K8sManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::SourceDir() + "/tools/oracle/node_modules/kubernetes-models")) {
      if (testing::InCi())
        FAIL() << "CI=true but tools/oracle/node_modules lacks kubernetes-models "
                  "(scripts/install-deps.sh)";
      GTEST_SKIP()
          << "tools/oracle/node_modules/kubernetes-models is missing (run scripts/install-deps.sh)";
    }
    root_ = (fs::temp_directory_path() / ("k8s_" + std::to_string(getpid()))).string();
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A copy of the manifests with `from` replaced by `to` in `file`.
  std::string BrokenCopy(const std::string& name, const std::string& file, const std::string& from,
                         const std::string& to) {
    const std::string dir = root_ + "/" + name;
    fs::copy(testing::SourceDir() + "/deploy/kubernetes", dir, fs::copy_options::recursive);
    std::string text = Read(dir + "/" + file);
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(dir + "/" + file) << text;
    return dir;
  }

  std::string root_;
};

TEST_F(K8sManifestsTest, ManifestsPassTheSchemasAndMatchTheServer) {
  const std::string repo = root_ + "/repo";
  const std::string init = std::string(INFLIGHT_BINARY_DIR) +
                           "/apps/inflight-server init-repo --model " + testing::SourceDir() +
                           "/models/demo/inflight-demo-q8_0.gguf --out " + repo + " >/dev/null";
  ASSERT_EQ(std::system(init.c_str()), 0);
  // As the manifests run it: keys from a file (the Secret's), so the checker can see that the
  // probes' paths answer without one.
  std::ofstream(root_ + "/keys") << "# KEY [TENANT]\nk8s-test-key tenant\n";
  auto server = testing::ServerProcess::Start({"--model-repository", repo, "--api-key-file",
                                               root_ + "/keys", "--admin-key", "k8s-admin-key"});
  ASSERT_TRUE(server);
  // The per-model gauges appear once the stats loop has run.
  httplib::Client metrics_port("127.0.0.1", server->metrics_port);
  std::string metrics;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (metrics.find("request_type=\"waiting\"") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    auto r = metrics_port.Get("/metrics", {{"Authorization", "Bearer k8s-admin-key"}});
    metrics = r && r->status == 200 ? r->body : "";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ofstream(root_ + "/metrics.txt") << metrics;
  std::string output;
  EXPECT_EQ(RunChecker(testing::SourceDir() + "/deploy/kubernetes", root_ + "/metrics.txt", &output,
                       "http://127.0.0.1:" + std::to_string(server->http_port)),
            0)
      << output;
  EXPECT_NE(output.find(" passed, 0 failed"), std::string::npos) << output;
}

TEST_F(K8sManifestsTest, BrokenManifestsFail) {
  struct Case {
    const char* name;
    const char* file;
    const char* from;
    const char* to;
    const char* expect;
  };
  const Case cases[] = {
      {"schema", "inflight.yaml", "replicas: 2", "replicas: two", "must be integer"},
      {"probe", "inflight.yaml",
       "path: /v2/health/ready, port: http}\n            periodSeconds: 5\n            "
       "failureThreshold: 2",
       "path: /healthz, port: http}\n            periodSeconds: 5\n            failureThreshold: 2",
       "readiness probe"},
      {"scrape", "inflight.yaml", "prometheus.io/port: \"8002\"", "prometheus.io/port: \"9090\"",
       "prometheus.io/port"},
      {"hpa", "inflight-prometheus-adapter.yaml", "as: inflight_waiting_requests",
       "as: something_else", "prometheus-adapter rule"},
      {"hostfile", "inflight-leader-mode.yaml", "    inflight-mpi-1.inflight-mpi slots=1\n", "",
       "hostfile lists 1 hosts"},
      {"service", "inflight.yaml", "targetPort: grpc", "targetPort: grpcs",
       "which no container has"},
      {"no-keys", "inflight.yaml", "\"--api-key-file\", \"/etc/inflight-keys/keys\"",
       "\"--log-verbose\", \"0\"", "runs without --api-key-file"},
      {"key-mount", "inflight.yaml", "{name: api-keys, mountPath: /etc/inflight-keys",
       "{name: api-keys, mountPath: /etc/other-keys", "is not under any volumeMount"},
      {"key-secret", "inflight-leader-mode.yaml", "    secretName: inflight-api-keys",
       "    secretName: inflight-keys-typo", "is not defined"},
      {"key-file", "inflight-leader-mode.yaml", "-- --api-key-file /etc/inflight-keys/keys",
       "-- --api-key-file /etc/inflight-keys/key.txt", "holds no key.txt"},
  };
  for (const Case& c : cases) {
    std::string output;
    EXPECT_NE(RunChecker(BrokenCopy(c.name, c.file, c.from, c.to), "", &output), 0)
        << c.name << ":\n"
        << output;
    EXPECT_NE(output.find(c.expect), std::string::npos) << c.name << ":\n" << output;
  }
}

}  // namespace
}  // namespace inflight
