// Which stored type each weight matrix gets when writing a GGUF: one type for all of them, or
// one of llama.cpp's llama-quantize mixes (Q4_K_M: Q4_K with Q6_K for the output and for
// attn_v / ffn_down in a third of the layers, ...), so tests and benchmarks can write the
// files users download.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "tensor/dtype.h"

namespace inflight {

class QuantMix {
 public:
  // A type name ("q8_0", "q4_k", "f16", ...) or a mix: q4_k_m, q5_k_m, q3_k_m, q2_k_mix
  // (llama-quantize's "Q2_K"), q4_0_mix (Q4_0 with a Q6_K output, llama-quantize's "Q4_0"),
  // iq4_xs_mix, mxfp4_moe (MXFP4 experts, Q8_0 elsewhere). INVALID_ARGUMENT for anything else,
  // naming the choices.
  static StatusOr<QuantMix> FromName(const std::string& name);
  static QuantMix Uniform(DType type);
  static const char* Names();

  // The type of GGUF matrix `tensor` ("blk.3.ffn_down.weight", "output.weight", ...) with rows
  // of `cols` elements in a model of `num_layers`. A row length that is not a multiple of the
  // type's block falls back as llama-quantize does (K-quants to a 32-block type, then F16).
  // `tied_output`: token_embd.weight is also the output matrix.
  DType TypeFor(const std::string& tensor, int64_t cols, int num_layers, bool tied_output) const;
  const std::string& name() const { return name_; }
  // GGUF's general.file_type for this mix: llama.cpp's LLAMA_FTYPE value (a uint32: llama.cpp
  // refuses a file whose general.file_type has another type), or nullopt when no value names
  // it (the key is then left out, and readers guess from the tensors).
  std::optional<uint32_t> LlamaFileType() const;

 private:
  std::string name_;
  DType base_ = DType::kF16;
  DType output_ = DType::kF16;
  DType experts_ = DType::kF32;  // mxfp4_moe: the 3-D expert tensors' type (F32: no rule)
  bool mix_ = false;
};

}  // namespace inflight
