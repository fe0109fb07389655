#include "test_paths.h"

namespace inflight_test_paths {
std::string SourceDir() { return INFLIGHT_TEST_SOURCE_DIR; }
std::string BinaryDir() { return INFLIGHT_TEST_BINARY_DIR; }
}  // namespace inflight_test_paths
