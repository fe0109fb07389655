// inflight-server with a tensor/pipeline-parallel model, end to end on the bundled demo model:
// leader mode (mpirun -np 2 inflight-server) and orchestrator mode (the server spawns its
// worker) serve exactly the texts a single-process server serves, whole and streamed; killing
// a worker turns the server not ready within 5 s and ends every open stream with an error;
// ranks that disagree on the model or on the layout are refused with a message.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/mount.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "mpi_test_util.h"
#include "server_harness.h"
#include "slurm_cluster.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;
using testing::Generate;
using testing::GenerateStream;
using testing::Streamed;

std::string DemoModel() { return testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf"; }

std::vector<std::string> Mpirun(int np) {
  return {"mpirun",          "--allow-run-as-root",
          "--oversubscribe", "--enable-recovery",
          "--mca",           "btl",
          "self,vader,tcp",  "-np",
          std::to_string(np)};
}

const std::vector<std::string> kPrompts = {"Once upon a time", "The little dog",
                                           "Lily and Ben went to the park"};

int Status(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  auto r = c.Get(path.c_str());
  return r ? r->status : 0;
}

// The pid a follower rank logged ("rank 1 (pid 1234): ...").
pid_t FollowerPid(const std::string& log, int rank) {
  std::smatch m;
  const std::regex re("rank " + std::to_string(rank) + " \\(pid ([0-9]+)\\)");
  return std::regex_search(log, m, re) ? static_cast<pid_t>(std::stol(m[1])) : -1;
}

// Kills `worker` and returns the seconds until the server stops reporting ready (10 at most).
double KillAndTimeNotReady(pid_t worker, int port) {
  EXPECT_EQ(kill(worker, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  while (Status(port, "/v2/health/ready") == 200 &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
}

class ParallelServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = (fs::temp_directory_path() / ("parallel_server_" + std::to_string(getpid()))).string();
    for (const auto& [name, flags] :
         std::vector<std::pair<std::string, std::string>>{{"tp1", ""},
                                                          {"tp2", " --tensor-parallel-size 2"},
                                                          {"pp2", " --pipeline-parallel-size 2"}}) {
      const std::string cmd = std::string(INFLIGHT_BINARY_DIR) +
                              "/apps/inflight-server init-repo --model " + DemoModel() + " --out " +
                              root_ + "/" + name + flags + " >/dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    // The single-process server's texts: what every parallel layout must serve.
    auto server = testing::ServerProcess::Start({"--model-repository", root_ + "/tp1"});
    ASSERT_TRUE(server);
    for (const std::string& p : kPrompts) expected_.push_back(Generate(server->http_port, p));
    expected_stream_ = GenerateStream(server->http_port, kPrompts[0], 40).text;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static void ExpectSameTexts(int port) {
    for (size_t i = 0; i < kPrompts.size(); ++i)
      EXPECT_EQ(Generate(port, kPrompts[i]), expected_[i]) << kPrompts[i];
    const Streamed s = GenerateStream(port, kPrompts[0], 40);
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(s.text, expected_stream_);
  }

  static std::string root_;
  static std::vector<std::string> expected_;
  static std::string expected_stream_;
};
std::string ParallelServerTest::root_;
std::vector<std::string> ParallelServerTest::expected_;
std::string ParallelServerTest::expected_stream_;

TEST_F(ParallelServerTest, LeaderModeServesTheSameTextsAndFailsCleanlyWhenAWorkerDies) {
  REQUIRE_MPIRUN();
  auto server = testing::ServerProcess::Start({"--model-repository", root_ + "/tp2"}, Mpirun(2));
  ASSERT_TRUE(server);
  EXPECT_EQ(Status(server->http_port, "/v2/health/ready"), 200);
  ExpectSameTexts(server->http_port);
  const pid_t worker = FollowerPid(server->log(), 1);
  ASSERT_GT(worker, 0) << server->log();

  // Three long streams in flight; the worker dies once each has streamed something.
  std::vector<std::atomic<int>> events(3);
  std::vector<Streamed> results(3);
  std::vector<std::thread> streams;
  for (int i = 0; i < 3; ++i) {
    streams.emplace_back(
        [&, i] { results[i] = GenerateStream(server->http_port, kPrompts[i], 480, &events[i]); });
  }
  for (int i = 0; i < 400 && (events[0] < 2 || events[1] < 2 || events[2] < 2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double not_ready_s = KillAndTimeNotReady(worker, server->http_port);
  std::printf("not ready %.2f s after the worker was killed\n", not_ready_s);
  EXPECT_LT(not_ready_s, 5.0) << "the server stayed ready " << not_ready_s
                              << " s after its worker died";
  EXPECT_NE(Status(server->http_port, "/v2/models/tensorrt_llm/ready"), 200);
  EXPECT_EQ(Status(server->http_port, "/v2/health/live"), 200) << "the leader itself must stay up";
  for (auto& t : streams) t.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(results[i].error.find("rank 1"), std::string::npos)
        << "stream " << i << " ended without naming the failure: '" << results[i].error << "'";
  }
  // New requests are refused at once, with the reason.
  httplib::Client c("127.0.0.1", server->http_port);
  auto r = c.Post("/v2/models/ensemble/generate", R"({"text_input": "Hello", "max_tokens": 5})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400);
  EXPECT_NE(r->body.find("parallel group failed"), std::string::npos) << r->body;
}

TEST_F(ParallelServerTest, PipelineParallelLeaderModeThroughTheLauncherScriptServesTheSameTexts) {
  REQUIRE_MPIRUN();
  // scripts/launch_inflight_server.py --world_size 2 (the reference's launch_triton_server.py).
  const std::vector<std::string> launcher = {
      "python3",         testing::SourceDir() + "/scripts/launch_inflight_server.py",
      "--world_size",    "2",
      "--oversubscribe", "--model_repo",
      root_ + "/pp2",    "--server"};
  auto server = testing::ServerProcess::Start({}, launcher);
  ASSERT_TRUE(server);
  ExpectSameTexts(server->http_port);
}

// deploy/slurm/inflight.sbatch submitted to a real Slurm (one node, two tasks): srun starts
// both ranks of the TP=2 model through PMIx, rank 0 serves the single-process server's texts,
// and scancel stops the job and every rank.
TEST_F(ParallelServerTest, LeaderModeUnderSlurmThroughTheBatchScriptServesTheSameTexts) {
  REQUIRE_SLURM();
  testing::SlurmCluster cluster;
  ASSERT_TRUE(cluster.ok()) << cluster.Logs();
  const std::string out = cluster.dir() + "/job.out";
  const std::string submit =
      "MODEL_REPO=" + root_ + "/tp2 INFLIGHT_SERVER=" + std::string(INFLIGHT_BINARY_DIR) +
      "/apps/inflight-server sbatch --parsable --output=" + out + " " + testing::SourceDir() +
      "/deploy/slurm/inflight.sbatch --http-port 0 --grpc-port 0 --metrics-port 0 2>&1";
  const auto [rc, job] = testing::RunCommand(submit);
  ASSERT_EQ(rc, 0) << job;
  const std::string job_id = job.substr(0, job.find_first_of(";\n"));
  int port = 0;
  std::string log;
  for (int i = 0; i < 1200 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(out);
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::smatch m;
    if (std::regex_search(log, m, std::regex("Started HTTPService at [0-9.]+:([0-9]+)")))
      port = std::stoi(m[1]);
  }
  ASSERT_GT(port, 0) << "the job's server never came up:\n" << log << cluster.Logs();
  EXPECT_EQ(Status(port, "/v2/health/ready"), 200);
  ExpectSameTexts(port);
  {
    std::ifstream in(out);  // the ranks' lines come in as srun forwards them
    log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_NE(log.find("2 tasks"), std::string::npos) << log;
  const pid_t follower = FollowerPid(log, 1);
  ASSERT_GT(follower, 0) << "no rank 1 followed the model:\n" << log;

  // scancel: the job ends and takes every rank with it.
  ASSERT_EQ(testing::RunCommand("scancel " + job_id).first, 0);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = testing::RunCommand("squeue -h -j " + job_id + " 2>/dev/null").second.empty() &&
           kill(follower, 0) != 0;
  }
  EXPECT_TRUE(gone) << "the job or its rank 1 outlived scancel";
  EXPECT_NE(Status(port, "/v2/health/live"), 200) << "the leader outlived scancel";
}

TEST_F(ParallelServerTest, OrchestratorModeSpawnsItsWorkerAndStopsIt) {
  REQUIRE_MPIRUN();
  testing::AllowMpiAsRoot();  // the server spawns its worker as root
  auto server = testing::ServerProcess::Start({"--model-repository", root_ + "/tp2"});
  ASSERT_TRUE(server);
  ExpectSameTexts(server->http_port);
  const pid_t worker = FollowerPid(server->log(), 1);
  ASSERT_GT(worker, 0) << server->log();
  EXPECT_EQ(kill(worker, 0), 0);
  const pid_t pid = server->pid();
  kill(pid, SIGTERM);
  int status = -1;
  for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server->log();
  for (int i = 0; i < 100 && kill(worker, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_NE(kill(worker, 0), 0) << "the spawned worker outlived its server";
}

TEST_F(ParallelServerTest, OrchestratorModeReportsADeadWorkerAndStaysUp) {
  REQUIRE_MPIRUN();
  testing::AllowMpiAsRoot();
  auto server = testing::ServerProcess::Start({"--model-repository", root_ + "/tp2"});
  ASSERT_TRUE(server);
  EXPECT_EQ(Generate(server->http_port, kPrompts[0]), expected_[0]);
  const pid_t worker = FollowerPid(server->log(), 1);
  ASSERT_GT(worker, 0) << server->log();
  EXPECT_LT(KillAndTimeNotReady(worker, server->http_port), 5.0);
  EXPECT_EQ(Status(server->http_port, "/v2/health/live"), 200);
  EXPECT_NE(Generate(server->http_port, kPrompts[1]).find("parallel group failed"),
            std::string::npos);
}

TEST_F(ParallelServerTest, ALayoutThatDoesNotMatchTheJobIsRefused) {
  REQUIRE_MPIRUN();
  // Two ranks, but no model asks for two.
  const std::string bin = std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-server";
  std::string mpirun;
  for (const std::string& a : Mpirun(2)) mpirun += a + " ";
  const std::string log = root_ + "/mismatch.log";
  std::system((mpirun + bin + " --http-port 0 --grpc-port 0 --metrics-port 0 --model-repository " +
               root_ + "/tp1 > " + log + " 2>&1")
                  .c_str());
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("mpirun started 2 ranks, but no model"), std::string::npos) << text;
  // Three ranks for a model of two.
  std::string mpirun3;
  for (const std::string& a : Mpirun(3)) mpirun3 += a + " ";
  std::system((mpirun3 + bin + " --http-port 0 --grpc-port 0 --metrics-port 0 --model-repository " +
               root_ + "/tp2 > " + log + " 2>&1")
                  .c_str());
  std::ifstream in3(log);
  const std::string text3((std::istreambuf_iterator<char>(in3)), std::istreambuf_iterator<char>());
  EXPECT_NE(
      text3.find(
          "needs tensor_parallel_size x pipeline_parallel_size = 2 ranks, but mpirun started 3"),
      std::string::npos)
      << text3;
}

TEST_F(ParallelServerTest, RanksThatSeeDifferentModelFilesAreRefused) {
  REQUIRE_MPIRUN();
  if (geteuid() != 0 || std::system("command -v unshare >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and unshare (mount namespaces)";
  // Rank 1 runs in a mount namespace where the model's path holds another file: the same
  // path on two "hosts" with different contents.
  // The demo model with bytes appended: it loads, but its size differs.
  const std::string other = root_ + "/other.gguf";
  fs::copy_file(DemoModel(), other, fs::copy_options::overwrite_existing);
  std::ofstream(other, std::ios::app | std::ios::binary) << std::string(64, '\0');
  const std::string weights = fs::canonical(root_ + "/tp2/weights").string();
  std::string weights_file;
  for (const auto& e : fs::directory_iterator(weights)) weights_file = e.path().string();
  const std::string bin = std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-server";
  const std::string args =
      " --http-port 0 --grpc-port 0 --metrics-port 0 --model-repository " + root_ + "/tp2";
  const std::string log = root_ + "/disagree.log";
  std::string mpmd =
      "timeout 120 mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 1 " + bin +
      args + " : -np 1 unshare -m sh -c 'mount --bind " + other + " " + weights_file + " && exec " +
      bin + args + "' > " + log + " 2>&1";
  std::system(mpmd.c_str());
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("ranks disagree on the model"), std::string::npos) << text;
}

}  // namespace
}  // namespace inflight
