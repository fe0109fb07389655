#include "bench_models.h"

#include <cstdio>
#include <filesystem>

#include "model/random_model.h"

namespace inflight {

StatusOr<std::unique_ptr<Model>> LoadOrWriteRandomModel(
    const std::string& path, const std::string& preset, const std::string& weights,
    const std::string& tokenizer, int32_t context_length, float block_output_scale) {
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "writing %s ...\n", path.c_str());
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    ASSIGN_OR_RETURN(TokenizerSpec spec, LoadTokenizerSpecFile(tokenizer));
    RandomModelParams params;
    ASSIGN_OR_RETURN(params.config, PresetConfig(Architecture::kLlama, preset));
    if (context_length > 0) params.config.context_length = context_length;
    params.mix = weights;
    params.tied_embeddings = false;
    params.block_output_scale = block_output_scale;
    RETURN_IF_ERROR(WriteRandomGguf(params, spec, path));
  }
  return Model::Load(path);
}

Status WriteRandomModelIfMissing(const std::string& path, const std::string& arch,
                                 const std::string& preset, int32_t layers,
                                 const std::string& weights, const std::string& tokenizer) {
  if (std::filesystem::exists(path)) return OkStatus();
  std::fprintf(stderr, "writing %s ...\n", path.c_str());
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  ASSIGN_OR_RETURN(TokenizerSpec spec, LoadTokenizerSpecFile(tokenizer));
  ASSIGN_OR_RETURN(Architecture a, ArchitectureFromName(arch));
  RandomModelParams params;
  ASSIGN_OR_RETURN(params.config, PresetConfig(a, preset));
  if (layers > 0) params.config.num_layers = layers;
  params.mix = weights;
  params.tied_embeddings = false;
  return WriteRandomGguf(params, spec, path);
}

double MacsPerToken(const Model& model) {
  const ModelWeights& w = model.weights();
  double macs = static_cast<double>(w.output.rows) * w.output.cols;
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) {
      if (!t->empty()) macs += static_cast<double>(t->rows) * t->cols;
    }
  }
  return macs;
}

}  // namespace inflight
