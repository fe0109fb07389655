// Tensor and pipeline parallelism over MPI (mpirun -np 2 or 4 on this machine, one compute
// thread per rank): the scenario of parallel_scenario.h run by parallel_harness must give
// exactly the outputs of the same scenario on one process, with streaming, cancellation,
// chunked context, prefix reuse, n = 2, beam search and max_utilization pauses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/random_model.h"
#include "mpi_test_util.h"
#include "parallel_scenario.h"
#include "slurm_cluster.h"
#include "test_util.h"

namespace inflight {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& stem) {
  return (fs::temp_directory_path() / (stem + "_" + std::to_string(getpid()))).string();
}

// mpirun as root with more ranks than cores, surviving a rank's death (--enable-recovery:
// otherwise mpirun kills the whole job, the leader included).
std::string MpirunCommand(int np) {
  return "timeout 600 mpirun --allow-run-as-root --oversubscribe --enable-recovery --mca btl "
         "self,vader,tcp -np " +
         std::to_string(np) + " ";
}

nlohmann::json RunParallel(const std::string& model, int tp, int pp, const std::string& scenario,
                           bool expect_ok = true, const std::string& launcher = "", int ep = 0) {
  const std::string out =
      TempPath("parallel_" + scenario + "_" + std::to_string(tp) + "x" + std::to_string(pp)) +
      ".json";
  const std::string cmd = (launcher.empty() ? MpirunCommand(tp * pp) : launcher) +
                          std::string(INFLIGHT_BINARY_DIR) + "/tests/parallel_harness --model " +
                          model + " --tp " + std::to_string(tp) + " --pp " + std::to_string(pp) +
                          " --ep " + std::to_string(ep) + " --scenario " + scenario + " --out " +
                          out;
  const int rc = std::system(cmd.c_str());
  // (mpirun --enable-recovery exits 0 when some ranks failed: the JSON tells.)
  if (expect_ok) EXPECT_EQ(rc, 0) << cmd;
  std::ifstream in(out);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  fs::remove(out);
  return j;
}

nlohmann::json RunLocal(const std::string& model_path, const std::string& scenario_name) {
  const testing::ScenarioConfig s = testing::ScenarioNamed(scenario_name);
  auto model = Model::Load(model_path);
  EXPECT_TRUE(model.ok());
  auto executor = Executor::Create(**model, testing::ScenarioExecutorConfig(s));
  EXPECT_TRUE(executor.ok());
  nlohmann::json j = testing::RunScenario(**executor, s, (*model)->config());
  (*executor)->Shutdown();
  return j;
}

void ExpectSameRun(const nlohmann::json& parallel, const nlohmann::json& local) {
  ASSERT_FALSE(parallel.is_discarded());
  ASSERT_FALSE(parallel.contains("error")) << parallel["error"];
  ASSERT_EQ(parallel["outputs"].size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    const auto& p = parallel["outputs"][i];
    EXPECT_TRUE(p["final"].get<bool>()) << "request " << i;
    EXPECT_EQ(p["error"], "") << "request " << i;
    EXPECT_EQ(p["sequences"], local["outputs"][i]["sequences"]) << "request " << i;
  }
  // Cancelled after 5 streamed tokens: what came is the start of the uncancelled output.
  const auto& cancelled = parallel["cancelled"];
  EXPECT_EQ(cancelled["finish"], static_cast<int>(FinishReason::kCancelled));
  const auto tokens = cancelled["tokens"].get<std::vector<int32_t>>();
  const auto reference = local["cancelled"]["tokens"].get<std::vector<int32_t>>();
  EXPECT_GE(tokens.size(), 5u);
  EXPECT_LT(tokens.size(), 400u);
  const size_t common = std::min(tokens.size(), reference.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.begin() + common, reference.begin()));
  EXPECT_GT(parallel["reused_blocks"].get<int64_t>(), 0) << "the shared prefix was never reused";
  EXPECT_LE(parallel["max_context_tokens"].get<int64_t>(), 96)
      << "prompts of up to 190 tokens must run in chunks";
  EXPECT_EQ(parallel["kv_used_at_end"], 0);
  EXPECT_EQ(parallel["window_kv_used_at_end"], 0);
  EXPECT_EQ(parallel["window_kv_blocks"], local["window_kv_blocks"]) << "the same window group";
  EXPECT_EQ(parallel["unfinished_at_end"], 0);
  EXPECT_GT(parallel["comm"]["bytes"].get<int64_t>(), 0);
}

class ParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto config = PresetConfig(Architecture::kLlama, "tiny");
    ASSERT_TRUE(config.ok());
    RandomModelParams params;
    params.config = *config;
    params.dtype = DType::kQ8_0;
    params.seed = 21;
    model_ = TempPath("parallel_tiny") + ".gguf";
    ASSERT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab(), model_).ok());
    auto moe = PresetConfig(Architecture::kQwen3Moe, "tiny");
    ASSERT_TRUE(moe.ok());
    params.config = *moe;
    moe_model_ = TempPath("parallel_tiny_moe") + ".gguf";
    ASSERT_TRUE(WriteRandomGguf(params, testing::ByteFallbackVocab(), moe_model_).ok());
  }
  static void TearDownTestSuite() {
    fs::remove(model_);
    fs::remove(moe_model_);
  }
  static std::string model_, moe_model_;
};
std::string ParallelTest::model_, ParallelTest::moe_model_;

TEST_F(ParallelTest, TensorParallelTwoRanksEqualsOneProcess) {
  REQUIRE_MPIRUN();
  ExpectSameRun(RunParallel(model_, 2, 1, "default"), RunLocal(model_, "default"));
}

TEST_F(ParallelTest, PipelineParallelTwoStagesEqualsOneProcessUnderMaxUtilization) {
  REQUIRE_MPIRUN();
  const nlohmann::json parallel = RunParallel(model_, 1, 2, "max_utilization");
  ExpectSameRun(parallel, RunLocal(model_, "max_utilization"));
  EXPECT_GT(parallel["paused_total"].get<int64_t>(), 0)
      << "max_utilization never paused: the scenario tests nothing";
}

TEST_F(ParallelTest, TensorTimesPipelineFourRanksEqualsOneProcess) {
  REQUIRE_MPIRUN();
  ExpectSameRun(RunParallel(model_, 2, 2, "max_utilization"), RunLocal(model_, "max_utilization"));
}

// The 8-bit cache split by heads over two ranks and by layers over two stages, under pauses.
TEST_F(ParallelTest, Int8KvTensorTimesPipelineFourRanksEqualsOneProcess) {
  REQUIRE_MPIRUN();
  const nlohmann::json parallel = RunParallel(model_, 2, 2, "int8_kv");
  ExpectSameRun(parallel, RunLocal(model_, "int8_kv"));
  EXPECT_GT(parallel["paused_total"].get<int64_t>(), 0);
}

TEST_F(ParallelTest, StoriesTensorParallelEqualsOneProcess) {
  REQUIRE_MPIRUN();
  const std::string stories = testing::SharedDir() + "/models/llama2c/stories260K.bin";
  REQUIRE_SHARED_FILE(stories);
  ExpectSameRun(RunParallel(stories, 2, 1, "default"), RunLocal(stories, "default"));
}

// A mixture of experts (Qwen3-MoE shape: 16 experts, top 4, q/k norms): each rank computes
// its columns of every chosen expert, the router runs whole on every rank.
TEST_F(ParallelTest, MixtureOfExpertsTensorParallelEqualsOneProcess) {
  REQUIRE_MPIRUN();
  ExpectSameRun(RunParallel(moe_model_, 2, 1, "default"), RunLocal(moe_model_, "default"));
}

// Expert parallelism: each rank holds 8 of the 16 experts whole; every chosen expert's output
// is computed on its rank and gathered, and summed in the one process's order.
TEST_F(ParallelTest, ExpertParallelTwoRanksEqualsOneProcess) {
  REQUIRE_MPIRUN();
  const nlohmann::json parallel = RunParallel(moe_model_, 2, 1, "default", true, "", /*ep=*/2);
  ExpectSameRun(parallel, RunLocal(moe_model_, "default"));
  EXPECT_EQ(parallel["moe_ep_size"], 2);
  EXPECT_EQ(parallel["experts_held"], 8) << "rank 0 must hold 8 of the 16 experts";
}

// TP 4 = EP 2 x MoE-TP 2 (-np 4): attention split over 4 ranks (the 2 K/V heads held by 2
// ranks each), each expert's columns over the 2 ranks of its EP group, under max_utilization
// pauses.
TEST_F(ParallelTest, ExpertTimesTensorParallelFourRanksEqualsOneProcess) {
  REQUIRE_MPIRUN();
  const nlohmann::json parallel =
      RunParallel(moe_model_, 4, 1, "max_utilization", true, "", /*ep=*/2);
  ExpectSameRun(parallel, RunLocal(moe_model_, "max_utilization"));
  EXPECT_EQ(parallel["moe_ep_size"], 2);
  EXPECT_EQ(parallel["experts_held"], 8);
}

// A windowed family: Gemma 2 (llama.cpp's file: windows of 64 on alternate layers, attention
// and final soft-caps, post-norms), prompts up to 190 tokens in chunks across the window edge.
TEST_F(ParallelTest, Gemma2TensorParallelEqualsOneProcess) {
  REQUIRE_MPIRUN();
  const std::string gemma2 = testing::SharedDir() + "/golden/arch/gemma2-f16.gguf";
  REQUIRE_SHARED_FILE(gemma2);
  const nlohmann::json parallel = RunParallel(gemma2, 2, 1, "default");
  ExpectSameRun(parallel, RunLocal(gemma2, "default"));
  EXPECT_GT(parallel["window_kv_blocks"].get<int64_t>(), 0) << "no window group";
}

// Pipeline stages of a windowed model with KV cache groups: Gemma 3's first stage (layers
// 0-3) has only window layers, its second the one global layer; both keep their window
// layers' K/V in the window group, the tables and window-group copies go over the wire.
TEST_F(ParallelTest, Gemma3PipelineStagesWithWindowGroupEqualOneProcess) {
  REQUIRE_MPIRUN();
  const std::string gemma3 = testing::SharedDir() + "/golden/arch/gemma3-f16.gguf";
  REQUIRE_SHARED_FILE(gemma3);
  const nlohmann::json parallel = RunParallel(gemma3, 1, 2, "max_utilization");
  ExpectSameRun(parallel, RunLocal(gemma3, "max_utilization"));
  EXPECT_GT(parallel["window_kv_blocks"].get<int64_t>(), 0);
}

// Two hosts on one machine: network namespaces joined by a veth pair. mpirun runs on host A
// and starts host B's daemon through an "ssh" that enters B's namespace, as it would over ssh
// on a cluster; the ranks talk MPI over TCP across the veth only.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(getpid() % 100000);
    ns_ = {"inflA" + id, "inflB" + id};
    const int net = 10 + static_cast<int>(getpid() % 200);
    subnet_ = "10.231." + std::to_string(net) + ".";
    const std::string a = ns_[0], b = ns_[1], va = "va" + id, vb = "vb" + id;
    const std::string cmd =
        "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
        " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
        " && ip link set " + vb + " netns " + b + " && ip -n " + a + " addr add " + subnet_ +
        "1/24 dev " + va + " && ip -n " + b + " addr add " + subnet_ + "2/24 dev " + vb +
        " && ip -n " + a + " link set " + va + " up && ip -n " + b + " link set " + vb +
        " up && ip -n " + a + " link set lo up && ip -n " + b + " link set lo up";
    ok_ = std::system(cmd.c_str()) == 0;
    agent_ = TempPath("netns_ssh") + ".sh";
    std::ofstream(agent_) << "#!/bin/sh\n# mpirun's ssh: the command runs in the namespace of the "
                             "host it names.\nhost=\"$1\"; shift\n"
                          << "case \"$host\" in " << subnet_ << "1) ns=" << a << ";; " << subnet_
                          << "2) ns=" << b
                          << ";; *) exit 1;; esac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n";
    fs::permissions(agent_, fs::perms::owner_all);
    hostfile_ = TempPath("netns_hosts");
    std::ofstream(hostfile_) << subnet_ << "1 slots=1\n" << subnet_ << "2 slots=1\n";
  }
  ~TwoHosts() {
    for (const std::string& n : ns_) std::system(("ip netns del " + n + " 2>/dev/null").c_str());
    fs::remove(agent_);
    fs::remove(hostfile_);
  }
  bool ok() const { return ok_; }
  // Each host has its own cores on a cluster: no binding (both would take core 0 here).
  std::string Mpirun() const {
    return "timeout 600 ip netns exec " + ns_[0] +
           " mpirun --allow-run-as-root --enable-recovery --bind-to none --hostfile " + hostfile_ +
           " --mca plm_rsh_agent " + agent_ + " --mca btl self,tcp --mca btl_tcp_if_include " +
           subnet_ + "0/24 --mca oob_tcp_if_include " + subnet_ + "0/24 -np 2 ";
  }

 private:
  std::vector<std::string> ns_;
  std::string subnet_, agent_, hostfile_;
  bool ok_ = false;
};

TEST_F(ParallelTest, TwoHostsInNetworkNamespacesOverTcpEqualOneProcess) {
  REQUIRE_MPIRUN();
  if (geteuid() != 0 || std::system("command -v ip >/dev/null 2>&1") != 0) {
    if (testing::InCi()) FAIL() << "CI=true but network namespaces need root and iproute2";
    GTEST_SKIP() << "network namespaces need root and iproute2";
  }
  TwoHosts hosts;
  ASSERT_TRUE(hosts.ok()) << "could not make the two network namespaces";
  ExpectSameRun(RunParallel(model_, 2, 1, "default", true, hosts.Mpirun()),
                RunLocal(model_, "default"));
  // Expert parallelism across the hosts: each host holds half the experts.
  const nlohmann::json moe = RunParallel(moe_model_, 2, 1, "default", true, hosts.Mpirun(), 2);
  ExpectSameRun(moe, RunLocal(moe_model_, "default"));
  EXPECT_EQ(moe["experts_held"], 8);
}

// Leader mode under a real Slurm (one node, two tasks): srun starts the ranks through PMIx,
// no mpirun. Expert parallelism, so the run covers the MoE exchange too.
TEST_F(ParallelTest, SlurmSrunThroughPmixEqualsOneProcess) {
  REQUIRE_SLURM();
  testing::SlurmCluster cluster;
  ASSERT_TRUE(cluster.ok()) << cluster.Logs();
  const nlohmann::json parallel =
      RunParallel(moe_model_, 2, 1, "default", true,
                  "timeout 600 srun --mpi=pmix --kill-on-bad-exit=0 -n 2 ", /*ep=*/2);
  ExpectSameRun(parallel, RunLocal(moe_model_, "default"));
  EXPECT_EQ(parallel["experts_held"], 8);
}

TEST_F(ParallelTest, ALayoutTheModelCannotTakeIsRefusedOnEveryRank) {
  REQUIRE_MPIRUN();
  // The tiny model has 4 query heads: 3-way tensor parallelism cannot split them.
  const nlohmann::json j = RunParallel(model_, 3, 1, "default", /*expect_ok=*/false);
  ASSERT_TRUE(j.contains("error"));
  EXPECT_NE(j["error"].get<std::string>().find("4 query heads"), std::string::npos) << j["error"];
}

}  // namespace
}  // namespace inflight
