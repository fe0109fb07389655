// Run by parallel_test under mpirun: rank 0 builds a tensor/pipeline-parallel executor over
// the MPI job, runs the scenario of parallel_scenario.h and writes its JSON to --out; the
// other ranks follow. Exit code 0 when every rank finished cleanly.
//
//   mpirun -np 2 parallel_harness --model M --tp 2 --pp 1 --scenario NAME --out FILE
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "parallel/parallel_runner.h"
#include "parallel_scenario.h"

namespace {

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  if (rank != 0) {
    const inflight::Status st = inflight::parallel::RunFollower(MPI_COMM_WORLD);
    if (!st.ok()) {
      std::cerr << "rank " << rank << ": " << st.message() << "\n";
      std::_Exit(1);
    }
  } else {
    const inflight::testing::ScenarioConfig scenario =
        inflight::testing::ScenarioNamed(Arg(argc, argv, "--scenario", "default"));
    inflight::parallel::ParallelConfig parallel;
    parallel.tp_size = std::atoi(Arg(argc, argv, "--tp", "1").c_str());
    parallel.pp_size = std::atoi(Arg(argc, argv, "--pp", "1").c_str());
    parallel.moe_ep_size = std::atoi(Arg(argc, argv, "--ep", "0").c_str());
    parallel.share_host_cores = false;  // one compute thread per rank (the scenario's num_threads)
    auto runner = inflight::parallel::ParallelModelRunner::Create(
        MPI_COMM_WORLD, Arg(argc, argv, "--model"),
        inflight::testing::ScenarioExecutorConfig(scenario), parallel);
    nlohmann::json out;
    if (!runner.ok()) {
      out["error"] = runner.status().message();
      code = 2;
    } else {
      inflight::parallel::ParallelModelRunner* raw = runner->get();
      const inflight::ModelConfig model = raw->model().config();
      inflight::Executor executor(std::move(runner).value(),
                                  inflight::testing::ScenarioExecutorConfig(scenario));
      out = inflight::testing::RunScenario(executor, scenario, model);
      const inflight::parallel::CommStats stats = raw->comm_stats();
      out["comm"] = {{"steps", stats.steps},
                     {"bytes", stats.bytes},
                     {"comm_ms", stats.comm_ms},
                     {"forward_ms", stats.forward_ms}};
      // Rank 0's share of the experts: what expert parallelism gave it.
      const inflight::ShardLayout& shard = raw->model().shard();
      out["moe_ep_size"] = shard.moe_ep_size;
      out["experts_held"] = shard.expert_end - shard.expert_begin;
      executor.Shutdown();
    }
    std::ofstream(Arg(argc, argv, "--out")) << out.dump();
    inflight::parallel::SendDismissal(MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return code;
}
