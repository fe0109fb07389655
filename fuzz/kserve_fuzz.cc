// libFuzzer target: client bytes through the KServe request parsers the HTTP frontend uses
// (the /infer JSON body with the binary tensor extension, the generate extension against a
// model config), then every parsed tensor through the size checks and conversions the
// serving core and backends apply, and back out through the response encoders. Nothing may
// crash, read out of bounds, overflow or recurse without bound.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontends/kserve_json.h"
#include "serving/model_config_util.h"

namespace {

const inflight::serving::ModelConfig& GenerateConfig() {
  static const auto* config =
      new inflight::serving::ModelConfig(*inflight::serving::ParseModelConfigText(R"(
name: "ensemble"
max_batch_size: 8
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
        { name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
        { name: "top_p" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
        { name: "seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true },
        { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
        { name: "table" data_type: TYPE_FP16 dims: [ -1, 2 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
)"));
  return *config;
}

void Exercise(const inflight::serving::InferTensor& t) {
  if (!t.CheckSize().ok()) return;
  if (t.dtype == inference::TYPE_STRING) {
    (void)t.AsStrings();
  } else {
    (void)t.AsInt64();
    (void)t.AsDouble();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  inflight::serving::InferResponse response;
  response.model_name = "m";
  response.final = true;
  if (mode & 1) {
    auto r = inflight::frontends::ParseGenerateRequest(body, GenerateConfig());
    if (!r.ok()) return 0;
    for (const auto& t : r->inputs) Exercise(t);
    response.outputs = r->inputs;
    (void)inflight::frontends::Dump(inflight::frontends::GenerateResponseToJson(response));
    return 0;
  }
  // Binary tensor extension: the JSON header ends at the last '}' (as a client would send).
  int64_t header_length = -1;
  if (mode & 2) {
    const size_t end = body.rfind('}');
    header_length =
        end == std::string::npos ? static_cast<int64_t>(mode >> 2) : static_cast<int64_t>(end + 1);
  }
  auto p = inflight::frontends::ParseInferRequest(body, header_length);
  if (!p.ok()) return 0;
  for (const auto& t : p->request.inputs) {
    Exercise(t);
    if (t.CheckSize().ok()) response.outputs.push_back(t);
  }
  std::string binary;
  (void)inflight::frontends::Dump(inflight::frontends::InferResponseToJson(response, *p, &binary));
  return 0;
}
