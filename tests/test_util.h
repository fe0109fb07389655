// Helpers shared by the tests: locating ../shared (skip outside CI when absent, fail in CI).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace inflight::testing {

inline std::string SharedDir() {
  if (const char* env = std::getenv("INFLIGHT_SHARED_DIR")) return env;
  return std::string(INFLIGHT_SOURCE_DIR) + "/../shared";
}

inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

inline std::string SourceDir() { return INFLIGHT_SOURCE_DIR; }

}  // namespace inflight::testing

// Skips the test when a ../shared file is missing (a user's clone), fails under CI=true.
#define REQUIRE_SHARED_FILE(path)                                                              \
  do {                                                                                         \
    if (!std::filesystem::exists(path)) {                                                      \
      if (::inflight::testing::InCi()) FAIL() << "CI=true but " << (path) << " is missing";   \
      GTEST_SKIP() << (path) << " is missing (../shared is not next to this clone)";           \
    }                                                                                          \
  } while (0)
