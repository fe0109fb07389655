// Raw KServe gRPC requests to the tensorrt_llm model and their outputs, shared by the server
// tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "grpc_service.grpc.pb.h"

namespace inflight::testing {

inline std::string RawInt32(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// A tensorrt_llm request with raw inputs: rows of equal length, streaming on or off.
inline inference::ModelInferRequest LlmRequest(const std::string& model, const std::string& id,
                                               const std::vector<std::vector<int32_t>>& rows,
                                               int32_t max_tokens, bool streaming) {
  inference::ModelInferRequest q;
  q.set_model_name(model);
  q.set_id(id);
  auto add = [&](const char* name, const char* dtype, std::vector<int64_t> shape,
                 const std::string& raw) {
    auto* in = q.add_inputs();
    in->set_name(name);
    in->set_datatype(dtype);
    for (int64_t d : shape) in->add_shape(d);
    q.add_raw_input_contents(raw);
  };
  // Rows are right-padded to the longest; input_lengths gives each one's true length.
  const int64_t b = static_cast<int64_t>(rows.size());
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<int32_t> flat, lens, outs;
  for (const auto& r : rows) {
    flat.insert(flat.end(), r.begin(), r.end());
    flat.insert(flat.end(), width - r.size(), 0);
    lens.push_back(static_cast<int32_t>(r.size()));
    outs.push_back(max_tokens);
  }
  add("input_ids", "INT32", {b, static_cast<int64_t>(width)}, RawInt32(flat));
  add("input_lengths", "INT32", {b, 1}, RawInt32(lens));
  add("request_output_len", "INT32", {b, 1}, RawInt32(outs));
  add("streaming", "BOOL", {b, 1}, std::string(b, streaming ? '\1' : '\0'));
  return q;
}

// The reference's stop: a new request with the running one's id and stop=true (other inputs
// ignored), answered with an empty final response.
inline inference::ModelInferRequest StopRequest(const std::string& model, const std::string& id,
                                                const std::vector<int32_t>& prompt) {
  inference::ModelInferRequest stop = LlmRequest(model, id, {prompt}, 1, false);
  auto* in = stop.add_inputs();
  in->set_name("stop");
  in->set_datatype("BOOL");
  in->add_shape(1);
  in->add_shape(1);
  stop.add_raw_input_contents(std::string(1, '\1'));
  (*stop.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  return stop;
}

inline std::vector<int32_t> OutputInt32(const inference::ModelInferResponse& r,
                                        const std::string& name) {
  for (int i = 0; i < r.outputs_size(); ++i) {
    if (r.outputs(i).name() == name) {
      const std::string& raw = r.raw_output_contents(i);
      std::vector<int32_t> v(raw.size() / 4);
      if (!v.empty()) std::memcpy(v.data(), raw.data(), raw.size());
      return v;
    }
  }
  return {};
}

}  // namespace inflight::testing
