// inflight-generate --prompts-file end to end: the real binary on the bundled demo model.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"

namespace {

using nlohmann::json;

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult Exec(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kBinary = std::string(INFLIGHT_BINARY_DIR) + "/apps/inflight-generate";
const std::string kModel = inflight::testing::SourceDir() + "/models/demo/inflight-demo-q8_0.gguf";

std::vector<int32_t> AloneIds(const std::vector<int32_t>& prompt, int n) {
  std::string ids;
  for (int32_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const CommandResult r = Exec(kBinary + " --model " + kModel + " --prompt-ids " + ids + " -n " +
                               std::to_string(n) + " --ignore-eos --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return json::parse(r.out, nullptr, false).value("generated_ids", std::vector<int32_t>());
}

TEST(OfflineBatchCli, EveryRequestGetsItsAloneOutputAndASummary) {
  const std::string file = ::testing::TempDir() + "/offline_requests.jsonl";
  {
    std::ofstream f(file);
    f << R"({"prompt": "Once upon a time", "max_tokens": 24})"
      << "\n";
    // Arrives with the first (both wait at the start, so they share steps however fast the
    // engine is); the others arrive later.
    f << R"({"prompt": "The cat", "max_tokens": 9, "arrival_ms": 0})"
      << "\n";
    f << "\n";
    f << R"({"prompt_ids": [1, 300, 301, 302], "max_tokens": 5, "arrival_ms": 1})"
      << "\n";
    f << R"({"prompt": "Tom said,", "max_tokens": 16, "arrival_ms": 2})"
      << "\n";
  }
  const CommandResult r = Exec(kBinary + " --model " + kModel + " --prompts-file " + file +
                               " --ignore-eos --max-batch-size 3 --chunked-context "
                               "--max-num-tokens 64 --kv-cache-tokens 4096"
                               " --tokens-per-block 16 --kv-reuse --policy max_utilization");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<json> requests;
  json summary;
  while (std::getline(lines, line)) {
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j.contains("summary"))
      summary = j["summary"];
    else
      requests.push_back(j);
  }
  ASSERT_EQ(requests.size(), 4u);
  const int max_tokens[] = {24, 9, 5, 16};
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const json& q = requests[i];
    EXPECT_EQ(q["index"], i);
    const auto prompt = q["prompt_ids"].get<std::vector<int32_t>>();
    const auto got = q["generated_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(got.size(), static_cast<size_t>(max_tokens[i]));
    EXPECT_EQ(got, AloneIds(prompt, max_tokens[i])) << "request " << i;
    EXPECT_EQ(q["finish_reason"], "length");
    EXPECT_GE(q["ttft_ms"].get<double>(), q["queue_ms"].get<double>());
    EXPECT_GE(q["end_ms"].get<double>(), q["arrival_ms"].get<double>());
    total += static_cast<int64_t>(got.size());
  }
  EXPECT_EQ(requests[0]["text"].get<std::string>().empty(), false);
  EXPECT_EQ(summary["requests"], 4);
  EXPECT_EQ(summary["failed"], 0);
  EXPECT_EQ(summary["output_tokens"], total);
  EXPECT_GE(summary["peak_batch_size"].get<int>(), 2);
  EXPECT_LE(summary["peak_batch_size"].get<int>(), 3);
  EXPECT_EQ(summary["policy"], "max_utilization");
  EXPECT_GT(summary["output_tokens_per_second"].get<double>(), 0);
}

TEST(OfflineBatchCli, BadLinesAndImpossibleRequestsAreReportedClearly) {
  const std::string bad = ::testing::TempDir() + "/offline_bad.jsonl";
  std::ofstream(bad) << R"({"prompt": "ok", "max_tokens": 2})"
                     << "\n"
                     << "{not json\n";
  CommandResult r = Exec(kBinary + " --model " + kModel + " --prompts-file " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;

  const std::string too_long = ::testing::TempDir() + "/offline_too_long.jsonl";
  std::string long_prompt;
  for (int i = 0; i < 3000; ++i) long_prompt += "word ";
  std::ofstream(too_long) << R"({"prompt": ")" << long_prompt << R"(", "max_tokens": 2})"
                          << "\n"
                          << R"({"prompt": "ok", "max_tokens": 2})"
                          << "\n";
  r = Exec(kBinary + " --model " + kModel + " --prompts-file " + too_long);
  EXPECT_EQ(r.exit_code, 2) << r.out;  // one request refused, the other served
  EXPECT_NE(r.out.find("maximum input length"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"failed\":1"), std::string::npos) << r.out;

  r = Exec(kBinary + " --model " + kModel + " --prompts-file /nonexistent.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}

}  // namespace
