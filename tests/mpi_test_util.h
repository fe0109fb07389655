// Helpers of the tests that run mpirun (parallel_test, parallel_server_test).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#include "test_util.h"

// Skips the test when mpirun is missing (a user's machine), fails under CI=true.
#define REQUIRE_MPIRUN()                                                                        \
  do {                                                                                          \
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {                                \
      if (::inflight::testing::InCi()) FAIL() << "CI=true but mpirun (openmpi-bin) is missing"; \
      GTEST_SKIP() << "mpirun is missing (apt-get install openmpi-bin)";                        \
    }                                                                                           \
  } while (0)

namespace inflight::testing {

// Open MPI refuses to run as root unless told (its own opt-in); the tests run as root in CI.
// Inherited by the servers and mpiruns a test starts.
inline void AllowMpiAsRoot() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}

}  // namespace inflight::testing
