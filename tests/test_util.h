// Helpers shared by the tests: locating ../shared (skip outside CI when absent, fail in CI).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

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

// A small SentencePiece-style vocabulary for models whose tokenizer plays no part in a test:
// <unk> <s> </s>, the 256 byte tokens, then `words` (scored in order).
inline TokenizerSpec ByteFallbackVocab(const std::vector<std::string>& words = {}) {
  TokenizerSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    spec.tokens.push_back(buf);
    spec.types.push_back(TokenType::kByte);
  }
  for (const std::string& w : words) {
    spec.tokens.push_back(w);
    spec.types.push_back(TokenType::kNormal);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  for (size_t i = 259; i < spec.tokens.size(); ++i) spec.scores[i] = -static_cast<float>(i);
  spec.unk_id = 0, spec.bos_id = 1, spec.eos_id = 2;
  return spec;
}

}  // namespace inflight::testing

// Skips the test when a ../shared file is missing (a user's clone), fails under CI=true.
#define REQUIRE_SHARED_FILE(path)                                                           \
  do {                                                                                      \
    if (!std::filesystem::exists(path)) {                                                   \
      if (::inflight::testing::InCi()) FAIL() << "CI=true but " << (path) << " is missing"; \
      GTEST_SKIP() << (path) << " is missing (../shared is not next to this clone)";        \
    }                                                                                       \
  } while (0)
