// The packed stop/bad word list tensor of TensorRT-LLM: [B, 2, N], row 0 the words' token ids
// concatenated (padded with 0), row 1 each word's cumulative end offset (padded with -1).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "serving/infer_tensor.h"

namespace inflight::serving {

using WordList = std::vector<std::vector<int32_t>>;

// The words of batch row `row` of a [B,2,N] (or [2,N]) tensor. INVALID_ARGUMENT for an odd
// size, offsets past the ids, decreasing offsets or values after the -1 padding.
StatusOr<WordList> WordListRow(const InferTensor& t, int64_t row);
// Packs one word list per batch row into a [B,2,N] INT32 tensor (N = the longest row).
InferTensor PackWordLists(const std::string& name, const std::vector<WordList>& rows);

}  // namespace inflight::serving
