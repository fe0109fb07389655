// inflight-model: inspect model files and write random-weight models of real architectures.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "format/gguf.h"
#include "jinja/template.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "model/quant_mix.h"
#include "model/random_model.h"

using namespace inflight;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "inflight-model: %s\n", s.message().c_str());
  return 1;
}

int Info(const std::string& path) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    auto f = GgufFile::Open(path);
    if (!f.ok()) return Fail(f.status());
    std::printf("GGUF v%u, %zu metadata keys, %zu tensors, alignment %lu\n", (*f)->version(),
                (*f)->metadata().size(), (*f)->tensors().size(), (unsigned long)(*f)->alignment());
    for (const auto& [key, value] : (*f)->metadata())
      std::printf("  %s = %s\n", key.c_str(), value.DebugString().c_str());
    for (const auto& t : (*f)->tensors()) {
      std::string dims;
      for (int64_t d : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      std::printf("  tensor %-32s %-6s [%s]\n", t.name.c_str(), GgmlTypeName(t.ggml_type).c_str(),
                  dims.c_str());
    }
  }
  auto m = Model::Load(path);
  if (!m.ok()) return Fail(m.status());
  std::printf("model: %s\n", (*m)->Describe().c_str());
  std::printf("decode weight bytes per token: %lld\n", (long long)(*m)->DecodeWeightBytes());
  if (const Tokenizer* t = (*m)->tokenizer()) {
    std::printf(
        "tokenizer: %s, %d tokens, bos %d, eos %d, add_bos %d\n",
        t->spec().model == TokenizerModel::kSentencePiece ? "sentencepiece-bpe" : "byte-level-bpe",
        t->vocab_size(), t->bos_id(), t->eos_id(), t->spec().add_bos);
    std::printf("chat template: %s\n",
                t->spec().chat_template.empty()
                    ? "none"
                    : (std::to_string(t->spec().chat_template.size()) + " bytes").c_str());
  } else {
    std::printf("tokenizer: none\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect and make inflight models"};
  app.require_subcommand(1);
  std::string info_path;
  auto* info = app.add_subcommand("info", "Print architecture, tensors and tokenizer of a model");
  info->add_option("file", info_path)->required();

  std::string arch_name = "llama", preset = "tiny", dtype_name = "f16", tokenizer_path, out;
  uint64_t seed = 1;
  bool untied = false;
  auto* mk =
      app.add_subcommand("make-random", "Write a GGUF with random weights and a real tokenizer");
  mk->add_option("--arch", arch_name, "llama, qwen2, qwen3, gpt2");
  mk->add_option("--preset", preset, "tiny, small, tinyllama-1.1b");
  mk->add_option("--dtype", dtype_name, QuantMix::Names());
  mk->add_option("--tokenizer", tokenizer_path, "tokenizer.model or tokenizer.json")->required();
  mk->add_option("--seed", seed);
  mk->add_flag("--untied", untied, "Separate output matrix");
  mk->add_option("--out,-o", out)->required();
  std::string convert_in, convert_out, convert_dtype = "f16";
  auto* cv =
      app.add_subcommand("convert", "Write a Hugging Face folder (or any loadable model) as GGUF");
  cv->add_option("input", convert_in,
                 "HF folder with config.json + *.safetensors, or a .gguf / llama2.c .bin")
      ->required();
  cv->add_option("--dtype", convert_dtype, QuantMix::Names());
  cv->add_option("--out,-o", convert_out)->required();
  std::string chat_template_path;
  cv->add_option("--chat-template", chat_template_path,
                 "A Jinja chat template file to store as tokenizer.chat_template");
  CLI11_PARSE(app, argc, argv);

  if (*info) return Info(info_path);
  if (*cv) {
    auto mix = QuantMix::FromName(convert_dtype);
    if (!mix.ok()) return Fail(mix.status());
    // Conversion re-reads the weights: F16 / BF16 matrices must keep their exact values (not
    // the int16 blocks the kernels multiply, ModelLoadOptions::exact_f16).
    ModelLoadOptions load_options;
    load_options.exact_f16 = true;
    auto model = Model::Load(convert_in, load_options);
    if (!model.ok()) return Fail(model.status());
    std::string chat_template;
    if (!chat_template_path.empty()) {
      std::ifstream in(chat_template_path, std::ios::binary);
      if (!in) return Fail(NotFoundError("cannot open chat template '" + chat_template_path + "'"));
      chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (auto t = jinja::Template::Parse(chat_template); !t.ok()) return Fail(t.status());
    }
    if (Status s = ExportGguf(**model, *mix, convert_out, chat_template); !s.ok()) return Fail(s);
    std::printf("wrote %s (%s)\n", convert_out.c_str(), mix->name().c_str());
    return 0;
  }
  auto arch = ArchitectureFromName(arch_name);
  if (!arch.ok()) return Fail(arch.status());
  auto config = PresetConfig(*arch, preset);
  if (!config.ok()) return Fail(config.status());
  auto mix = QuantMix::FromName(dtype_name);
  if (!mix.ok()) return Fail(mix.status());
  auto spec = LoadTokenizerSpecFile(tokenizer_path);
  if (!spec.ok()) return Fail(spec.status());
  RandomModelParams params;
  params.config = *config;
  params.mix = dtype_name;
  params.seed = seed;
  params.tied_embeddings = !untied;
  if (Status s = WriteRandomGguf(params, *spec, out); !s.ok()) return Fail(s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
