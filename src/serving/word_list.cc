#include "serving/word_list.h"

#include <algorithm>

namespace inflight::serving {

StatusOr<WordList> WordListRow(const InferTensor& t, int64_t row) {
  auto v = t.AsInt64();
  if (!v.ok()) return v.status();
  WordList words;
  if (v->empty()) return words;
  const int64_t rows = t.shape.size() >= 3 ? t.shape[0] : 1;
  if (rows <= 0 || v->size() % (2 * rows) != 0) {
    return InvalidArgumentError("'" + t.name + "' must have shape [B, 2, N]");
  }
  const int64_t n = static_cast<int64_t>(v->size()) / (2 * rows);
  const int64_t r = rows == 1 ? 0 : row;
  if (r >= rows) return InvalidArgumentError("'" + t.name + "' has fewer rows than input_ids");
  const int64_t* ids = v->data() + r * 2 * n;
  const int64_t* offsets = ids + n;
  int64_t start = 0;
  bool ended = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t end = offsets[i];
    if (end < 0) {
      ended = true;
      continue;
    }
    if (ended)
      return InvalidArgumentError("'" + t.name + "': offsets continue after the -1 padding");
    if (end > n || end <= start) {
      return InvalidArgumentError("'" + t.name +
                                  "': offsets must increase and stay within the token ids");
    }
    std::vector<int32_t> word;
    for (int64_t j = start; j < end; ++j) word.push_back(static_cast<int32_t>(ids[j]));
    words.push_back(std::move(word));
    start = end;
  }
  return words;
}

InferTensor PackWordLists(const std::string& name, const std::vector<WordList>& rows) {
  int64_t n = 1;  // as the reference's preprocessing: no words pads to [[0], [-1]]
  for (const auto& words : rows) {
    int64_t total = 0;
    for (const auto& w : words) total += static_cast<int64_t>(w.size());
    n = std::max({n, total, static_cast<int64_t>(words.size())});
  }
  std::vector<int32_t> data;
  for (const auto& words : rows) {
    std::vector<int32_t> ids, offsets;
    for (const auto& w : words) {
      ids.insert(ids.end(), w.begin(), w.end());
      offsets.push_back(static_cast<int32_t>(ids.size()));
    }
    ids.resize(n, 0);
    offsets.resize(n, -1);
    data.insert(data.end(), ids.begin(), ids.end());
    data.insert(data.end(), offsets.begin(), offsets.end());
  }
  return InferTensor::Int32(name, {static_cast<int64_t>(rows.size()), 2, n}, data);
}

}  // namespace inflight::serving
