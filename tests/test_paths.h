// Where the tests find the source tree and the build tree. The paths are compiled into one small
// file (test_paths.cc) rather than into every test, so a test's object does not depend on the
// folder the clone sits in and a compiler cache can reuse it from another clone.
#pragma once

#include <string>

namespace inflight_test_paths {
std::string SourceDir();  // the repository (CMAKE_SOURCE_DIR)
std::string BinaryDir();  // the build tree (CMAKE_BINARY_DIR)
}  // namespace inflight_test_paths
