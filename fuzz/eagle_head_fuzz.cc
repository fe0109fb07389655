// An EAGLE head's config.json (model/eagle.h) is a file users download: any bytes must load
// or be refused with a status (never a throw, a crash or an unbounded allocation), against a
// tiny model and real head files of its shape written once per process (an EAGLE-3 head and an
// EAGLE-1/2 head: each input is the config of both). A head that loads runs a committed row.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "model/eagle.h"
#include "model/model.h"
#include "model/random_model.h"

namespace {

struct Fixture {
  std::string dir;
  std::unique_ptr<inflight::Model> model;
  inflight::ThreadPool pool{1};
};

Fixture* Setup() {
  using namespace inflight;
  auto* f = new Fixture;
  f->dir =
      (std::filesystem::temp_directory_path() / ("eagle_head_fuzz_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(f->dir);
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(
        std::filesystem::temp_directory_path() / ("eagle_head_fuzz_" + std::to_string(getpid())),
        ec);
  });
  auto config = PresetConfig(Architecture::kLlama, "tiny");
  if (!config.ok()) std::abort();
  RandomModelParams params;
  params.config = *config;
  params.dtype = DType::kQ8_0;
  TokenizerSpec vocab;
  vocab.tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab.tokens.push_back(buf);
  }
  vocab.scores.assign(vocab.tokens.size(), 0.0f);
  const std::string gguf = f->dir + "/model.gguf";
  if (!WriteRandomGguf(params, vocab, gguf).ok()) std::abort();
  auto m = Model::Load(gguf);
  if (!m.ok()) std::abort();
  f->model = std::move(m).value();
  if (!WriteEagleHead(f->dir + "/head3", *f->model, false, f->pool, {0, 1, 1}).ok()) std::abort();
  if (!WriteEagleHead(f->dir + "/head1", *f->model, false, f->pool, {}, 1).ok()) std::abort();
  return f;
}

// What loaded is consistent with the model and runs.
void Run(inflight::EagleHead& h, Fixture& f) {
  using namespace inflight;
  const size_t states = h.version() == 1 ? 1 : 3;
  if (h.target_hidden_size() != f.model->config().hidden_size ||
      h.vocab_size() != f.model->config().vocab_size || h.aux_layers().size() != states)
    std::abort();
  std::vector<float> state(states * h.target_hidden_size(), 0.5f), out(h.hidden_size());
  EagleCache cache;
  EagleRow row;
  row.cache = &cache;
  row.token = 1;
  row.hidden = state.data();
  row.top = true;
  std::vector<int32_t> top;
  h.Forward({row}, true, 2, out.data(), &top, f.pool);
  if (top.size() != 2) std::abort();
  for (int32_t t : top)
    if (t < 0 || t >= h.vocab_size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace inflight;
  static Fixture* f = Setup();
  for (int version : {3, 1}) {
    const std::string dir = f->dir + "/head" + std::to_string(version);
    {
      std::ofstream out(dir + "/config.json", std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    auto head = EagleHead::Load(dir, *f->model, DType::kF16);
    if (head.ok()) Run(**head, *f);
  }
  return 0;
}
