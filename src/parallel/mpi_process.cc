#include "parallel/mpi_process.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "base/logging.h"
#include "parallel/parallel_runner.h"

namespace inflight::parallel {
namespace {

std::mutex mu;
bool initialized = false;
std::string world_holder;  // the model holding the world (leader mode)

}  // namespace

bool LaunchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

Status InitMpi() {
  std::lock_guard<std::mutex> lock(mu);
  if (initialized) return OkStatus();
  // A process that spawns workers places them on its own host, beyond its core count.
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    return UnavailableError("MPI_Init_thread failed");
  }
  initialized = true;
  if (provided < MPI_THREAD_MULTIPLE) {
    return FailedPreconditionError(
        "the MPI library does not support MPI_THREAD_MULTIPLE (Open MPI does)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return OkStatus();
}

bool MpiInitialized() {
  std::lock_guard<std::mutex> lock(mu);
  return initialized;
}

int WorldRank() {
  int rank = 0;
  if (MpiInitialized()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 1;
  if (MpiInitialized()) MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

StatusOr<MPI_Comm> ClaimWorld(int ranks, const std::string& model_name) {
  const int size = WorldSize();
  std::lock_guard<std::mutex> lock(mu);
  if (!world_holder.empty()) {
    return FailedPreconditionError("the " + std::to_string(size) +
                                   " MPI ranks already run model '" + world_holder +
                                   "': in leader mode they serve one parallel model (unload it "
                                   "first, or use orchestrator mode)");
  }
  if (ranks != size) {
    return FailedPreconditionError(
        "model '" + model_name + "' needs tensor_parallel_size x pipeline_parallel_size = " +
        std::to_string(ranks) + " ranks, but mpirun started " + std::to_string(size));
  }
  world_holder = model_name;
  return MPI_COMM_WORLD;
}

void ReleaseWorld() {
  std::lock_guard<std::mutex> lock(mu);
  world_holder.clear();
}

bool WorldClaimed() {
  std::lock_guard<std::mutex> lock(mu);
  return !world_holder.empty();
}

void DismissWorldFollowers() { SendDismissal(MPI_COMM_WORLD); }

Status RunWorldFollower() { return RunFollower(MPI_COMM_WORLD); }

StatusOr<MPI_Comm> SpawnWorkers(int workers, const std::string& worker_path) {
  RETURN_IF_ERROR(InitMpi());
  std::vector<char*> argv = {const_cast<char*>("--parallel-worker"), nullptr};
  std::vector<int> errors(static_cast<size_t>(workers));
  MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  if (MPI_Comm_spawn(worker_path.c_str(), argv.data(), workers, MPI_INFO_NULL, 0, MPI_COMM_SELF,
                     &inter, errors.data()) != MPI_SUCCESS) {
    return UnavailableError("could not spawn " + std::to_string(workers) + " workers of '" +
                            worker_path +
                            "' (as root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT=1 and "
                            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)");
  }
  MPI_Intercomm_merge(inter, /*high=*/0, &merged);
  MPI_Comm_free(&inter);
  return merged;
}

Status RunSpawnedWorker() {
  RETURN_IF_ERROR(InitMpi());
  MPI_Comm parent = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL)
    return FailedPreconditionError(
        "--parallel-worker: this process was not spawned by an inflight server");
  MPI_Intercomm_merge(parent, /*high=*/1, &merged);
  // One model per spawned group: its shutdown ends the worker.
  return RunFollower(merged, /*one_model=*/true);
}

void FinalizeMpi(bool group_failed) {
  if (!MpiInitialized() || group_failed) return;
  MPI_Finalize();
}

}  // namespace inflight::parallel
