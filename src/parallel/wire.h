// The bytes the leader sends its followers: a load request (which model, which parallel
// layout, the KV settings) and each step (block copies, then the batch plan). Both sides are
// this program, but a follower still checks every count against what is left of the message:
// a bad message is an error, never a read out of bounds.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace inflight::parallel {

class WireWriter {
 public:
  template <typename T>
  void Put(T value) {
    const size_t n = bytes_.size();
    bytes_.resize(n + sizeof(T));
    std::memcpy(bytes_.data() + n, &value, sizeof(T));
  }
  template <typename T>
  void PutArray(const T* values, int64_t count) {
    Put<int64_t>(count);
    const size_t n = bytes_.size();
    bytes_.resize(n + sizeof(T) * static_cast<size_t>(count));
    if (count > 0) std::memcpy(bytes_.data() + n, values, sizeof(T) * static_cast<size_t>(count));
  }
  void PutString(const std::string& s) { PutArray(s.data(), static_cast<int64_t>(s.size())); }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& bytes) : data_(bytes.data()), left_(bytes.size()) {}
  template <typename T>
  Status Get(T* value) {
    if (left_ < sizeof(T)) return DataLossError("a parallel step message is truncated");
    std::memcpy(value, data_, sizeof(T));
    data_ += sizeof(T), left_ -= sizeof(T);
    return OkStatus();
  }
  template <typename T>
  Status GetArray(std::vector<T>* values, int64_t max_count) {
    int64_t count = 0;
    RETURN_IF_ERROR(Get(&count));
    if (count < 0 || count > max_count || static_cast<uint64_t>(count) * sizeof(T) > left_) {
      return DataLossError("a parallel step message holds a bad array length");
    }
    values->resize(static_cast<size_t>(count));
    if (count > 0) std::memcpy(values->data(), data_, sizeof(T) * static_cast<size_t>(count));
    data_ += sizeof(T) * count, left_ -= sizeof(T) * count;
    return OkStatus();
  }
  Status GetString(std::string* s, int64_t max_bytes) {
    std::vector<char> v;
    RETURN_IF_ERROR(GetArray(&v, max_bytes));
    s->assign(v.begin(), v.end());
    return OkStatus();
  }
  bool done() const { return left_ == 0; }

 private:
  const char* data_;
  size_t left_;
};

// A batch plan that owns its arrays (a follower's copy of the leader's plan).
// A block copy the ranks make before a step, in KV cache group `group`
// (kvcache/kv_storage.h).
struct BlockCopy {
  int32_t group = 0;
  int32_t src = 0;
  int32_t dst = 0;
};

struct OwnedPlan {
  struct Chunk {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    std::vector<int32_t> window_blocks;  // the window group's table (-1 behind the window)
    std::vector<float> prompt_table;     // [rows, hidden] when the chunk holds p-tuning ids
    int32_t prompt_table_rows = 0;
    int32_t start_pos = 0;
    int32_t num_logits = 1;
    uint64_t lora_id = 0;  // 0: none
  };
  std::vector<Chunk> chunks;
  BatchPlan plan;  // views of `chunks`
};

// LoRA adapters the followers cache by LoraAdapter::id(): ids to forget, then new adapters
// (their matrices whole; each rank applies its own rows).
void EncodeAdapters(const std::vector<uint64_t>& drops,
                    const std::vector<const LoraAdapter*>& fresh, WireWriter* out);
Status DecodeAdapters(WireReader& in, const ModelConfig& config, std::vector<uint64_t>* drops,
                      std::vector<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>>* fresh);

// One step: block copies to make first, then the plan. Only the blocks the chunk's positions
// reach are sent, and a p-tuning table only with a chunk that uses one of its rows.
void EncodeStep(const std::vector<BlockCopy>& copies, const BatchPlan& plan,
                int32_t tokens_per_block, int32_t vocab_size, int32_t hidden_size,
                const std::vector<uint64_t>& lora_ids, WireWriter* out);
Status DecodeStep(WireReader& in, int32_t hidden_size, std::vector<BlockCopy>* copies,
                  OwnedPlan* plan);

}  // namespace inflight::parallel
