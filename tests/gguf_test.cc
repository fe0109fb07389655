// GGUF writer/reader round trip and robustness: truncated, corrupted and fuzzed files give a
// clear error, never a crash (this test also runs under ASan/UBSan).
#include "format/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/model.h"
#include "test_util.h"

namespace inflight {
namespace {

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), n);
}

TEST(Gguf, WriterReaderRoundTrip) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("a.u32", 7);
  w.SetI32("a.i32", -3);
  w.SetF32("a.f32", 1.5f);
  w.SetBool("a.bool", true);
  w.SetStringArray("a.strings", {"x", "", "z\n"});
  w.SetF32Array("a.floats", {0.25f, -2.0f});
  w.SetI32Array("a.ints", {1, 2, 3});
  std::vector<uint8_t> data(3 * 64 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(w.AddTensor("t", DType::kF32, {64, 3}, data).ok());
  EXPECT_FALSE(w.AddTensor("bad", DType::kF32, {64, 3}, std::vector<uint8_t>(5)).ok());
  const std::string path = TempPath("roundtrip.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ(**(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(**(*f)->GetInt("a.u32"), 7);
  EXPECT_EQ(**(*f)->GetInt("a.i32"), -3);
  EXPECT_EQ(**(*f)->GetFloat("a.f32"), 1.5);
  EXPECT_EQ(**(*f)->GetBool("a.bool"), true);
  EXPECT_EQ((*f)->Find("a.strings")->strings, (std::vector<std::string>{"x", "", "z\n"}));
  EXPECT_EQ((*f)->Find("a.floats")->floats, (std::vector<double>{0.25, -2.0}));
  EXPECT_EQ((*f)->Find("a.ints")->ints, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE((*f)->GetString("a.u32").ok());  // wrong type is an error, not a crash
  const GgufTensorInfo* t = (*f)->FindTensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(0, std::memcmp(t->data, data.data(), data.size()));
}

TEST(Gguf, RejectsNonGgufAndMissingFiles) {
  EXPECT_EQ(GgufFile::Open(TempPath("does-not-exist.gguf")).status().code(), StatusCode::kNotFound);
  const std::string path = TempPath("text.gguf");
  WriteBytes(path, std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, 11);
  auto f = GgufFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not a GGUF file"), std::string::npos);
  auto m = Model::Load(path);
  ASSERT_FALSE(m.ok());
}

TEST(Gguf, TruncatedModelsFailCleanly) {
  const std::string src = testing::SharedDir() + "/golden/llama-gqa-q4_0.gguf";
  REQUIRE_SHARED_FILE(src);
  const std::vector<uint8_t> bytes = ReadBytes(src);
  std::mt19937_64 rng(42);
  const std::string path = TempPath("truncated.gguf");
  std::vector<size_t> cuts = {0, 3, 4, 8, 16, 24, 100, 1000, bytes.size() / 2, bytes.size() - 1};
  for (int i = 0; i < 30; ++i) cuts.push_back(rng() % bytes.size());
  for (size_t cut : cuts) {
    WriteBytes(path, bytes, cut);
    auto m = Model::Load(path);
    ASSERT_FALSE(m.ok()) << "cut at " << cut;
    EXPECT_FALSE(m.status().message().empty());
  }
}

TEST(Gguf, CorruptedHeadersFailCleanly) {
  const std::string src = testing::SharedDir() + "/golden/gpt2-f16.gguf";
  REQUIRE_SHARED_FILE(src);
  const std::vector<uint8_t> bytes = ReadBytes(src);
  auto clean = GgufFile::Open(src);
  ASSERT_TRUE(clean.ok());
  // The header (metadata with the whole vocabulary) is the first ~1 MB of this file.
  const size_t header_end = std::min<size_t>(bytes.size(), 1 << 20);
  std::mt19937_64 rng(7);
  const std::string path = TempPath("fuzzed.gguf");
  int refused = 0, loaded = 0;
  for (int iter = 0; iter < 150; ++iter) {
    std::vector<uint8_t> b = bytes;
    const int flips = 1 + rng() % 8;
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % header_end;
      b[pos] = (iter % 3 == 0) ? 0xFF : static_cast<uint8_t>(rng());
    }
    WriteBytes(path, b, b.size());
    auto m = Model::Load(path);  // must return, never crash or read out of bounds
    if (m.ok()) {
      ++loaded;
    } else {
      ++refused;
      EXPECT_FALSE(m.status().message().empty());
    }
  }
  EXPECT_GT(refused, 0);
  (void)loaded;
}

TEST(Gguf, UnsupportedArchitectureAndTypeAreNamed) {
  GgufWriter w;
  w.SetString("general.architecture", "mamba");
  const std::string path = TempPath("mamba.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto m = Model::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("mamba"), std::string::npos);
}

// The llama.cpp-quantized K-quant files: cut anywhere, they fail with a message; a block whose
// F16 scale is NaN or infinite is refused at load, naming the tensor and the block.
TEST(Gguf, TruncatedAndCorruptBlockFormatsFailCleanly) {
  for (const char* name : {"llama-k-q4_k_m", "llama-k-q2_k", "llama-k-iq4_xs"}) {
    const std::string src = testing::SharedDir() + "/golden/" + name + ".gguf";
    REQUIRE_SHARED_FILE(src);
    std::vector<uint8_t> bytes = ReadBytes(src);
    const std::string path = TempPath(std::string(name) + "-bad.gguf");
    std::mt19937_64 rng(9);
    for (int i = 0; i < 8; ++i) {
      const size_t cut = bytes.size() / 2 + rng() % (bytes.size() / 2);
      WriteBytes(path, bytes, cut);
      auto m = Model::Load(path);
      ASSERT_FALSE(m.ok()) << name << " cut at " << cut;
      EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
    }
    auto clean = GgufFile::Open(src);
    ASSERT_TRUE(clean.ok());
    const GgufTensorInfo* t = (*clean)->FindTensor("blk.1.ffn_up.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->dtype.has_value());
    // The F16 super-scale d of block 3 (byte 0 of a block, Q2_K: byte 80), found in the file
    // by searching for the tensor's first blocks.
    const size_t block_bytes = DTypeBlockBytes(*t->dtype);
    const size_t d_at = *t->dtype == DType::kQ2_K ? 80 : 0;
    std::vector<uint8_t> bad = bytes;
    const auto pos = std::search(bad.begin(), bad.end(), t->data, t->data + 4 * block_bytes);
    ASSERT_NE(pos, bad.end());
    const size_t offset = static_cast<size_t>(pos - bad.begin()) + 3 * block_bytes + d_at;
    bad[offset] = 0x00, bad[offset + 1] = 0x7e;  // F16 NaN
    WriteBytes(path, bad, bad.size());
    auto m = Model::Load(path);
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_NE(m.status().message().find("blk.1.ffn_up.weight"), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find("block 3"), std::string::npos) << m.status().message();
    std::filesystem::remove(path);
  }
}

TEST(Gguf, AlignmentBelowEightIsRefused) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("general.alignment", 2);
  const std::string path = TempPath("align2.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("alignment"), std::string::npos);
}

}  // namespace
}  // namespace inflight
