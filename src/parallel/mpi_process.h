// How this process takes part in MPI (TensorRT-LLM's two communication modes):
// - leader mode: `mpirun -np N inflight-server ...` starts N copies; rank 0 serves and hands
//   the other N - 1 ranks to the one model whose tensor_parallel_size x pipeline_parallel_size
//   is N (ClaimWorld); the others wait in RunWorldFollower for its load request.
// - orchestrator mode: a server started on its own spawns tp x pp - 1 workers per parallel
//   model (MPI_Comm_spawn of executor_worker_path, by default this program with
//   --parallel-worker) and runs with them over the merged communicator (SpawnWorkers).
// MPI is initialised only when a process needs it. Thread-safe.
#pragma once

#include <mpi.h>

#include <string>

#include "base/status.h"

namespace inflight::parallel {

// Whether mpirun (or another PMIx launcher) started this process.
bool LaunchedByMpirun();
// Initialises MPI with MPI_THREAD_MULTIPLE, once. FAILED_PRECONDITION when the library cannot
// give that thread level.
Status InitMpi();
bool MpiInitialized();
int WorldRank();
int WorldSize();

// Leader mode: the world for one model of `ranks` ranks (the world's size), until released.
// FAILED_PRECONDITION when the sizes differ or another model holds it.
StatusOr<MPI_Comm> ClaimWorld(int ranks, const std::string& model_name);
void ReleaseWorld();
bool WorldClaimed();
// Leader mode, rank 0: tells the followers no model will need them (they exit).
void DismissWorldFollowers();
// Leader mode, rank > 0: follows the models rank 0 loads until dismissed (OK) or until a group
// fails (the error).
Status RunWorldFollower();

// Orchestrator mode: starts `workers` processes of `worker_path` with --parallel-worker on
// this host and returns the communicator of this process (rank 0) and them.
StatusOr<MPI_Comm> SpawnWorkers(int workers, const std::string& worker_path);
// In a spawned worker (--parallel-worker): follows its parent's model until stopped.
Status RunSpawnedWorker();

// Whether a parallel group of this process has failed (a rank died).
bool AnyGroupFailed();

// Ends MPI at exit; after a failed group it only exits (MPI_Finalize would wait for the dead).
void FinalizeMpi(bool group_failed);

}  // namespace inflight::parallel
