// KServe v2 JSON <-> serving types: the /infer body (JSON tensors and the binary tensor data
// extension), the generate extension's flat objects, and the model config as JSON.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/json_depth.h"
#include "frontends/shared_memory.h"
#include "serving/infer.h"
#include "serving/server.h"

namespace inflight::frontends {

// Compact JSON text; bytes that are not UTF-8 (a model may emit them) become U+FFFD instead
// of throwing.
std::string Dump(const nlohmann::json& j);
// The same for JSON kept in its keys' order (model text with invalid UTF-8 is replaced).
std::string Dump(const nlohmann::ordered_json& j);

// Parses client JSON; INVALID_ARGUMENT when it is malformed or nests deeper than max_depth.
StatusOr<nlohmann::json> ParseJsonBounded(std::string_view text, int max_depth = 64);

// Reads an input's bytes from shared memory (the frontend's SharedMemoryRegistry).
using SharedMemoryReader = std::function<StatusOr<std::string>(const SharedMemoryRef&)>;

// A tensor's shared_memory_* parameters; nullopt when it names no region. INVALID_ARGUMENT
// for a region without a byte size or values of the wrong type.
StatusOr<std::optional<SharedMemoryRef>> SharedMemoryRefFromJson(const nlohmann::json& parameters,
                                                                 const std::string& tensor);

struct ParsedInfer {
  serving::InferRequest request;
  bool binary_output_default = false;
  std::map<std::string, bool> binary_output;           // per requested output
  std::map<std::string, SharedMemoryRef> shm_outputs;  // requested outputs to shared memory
};

// body: JSON header, then binary tensors when header_length >= 0 (Inference-Header-Content-Length).
// Inputs may name shared memory when `shm` is given. INVALID_ARGUMENT with Triton's
// messages on bad input.
StatusOr<ParsedInfer> ParseInferRequest(const std::string& body, int64_t header_length,
                                        const SharedMemoryReader* shm = nullptr);

// The response JSON; binary outputs are appended to *binary (and the returned JSON names
// their sizes); outputs in request.shm_outputs carry only their region parameters (the
// frontend has written their bytes). An error response is {"error": ...}.
nlohmann::json InferResponseToJson(const serving::InferResponse& response,
                                   const ParsedInfer& request, std::string* binary);

// The generate extension: a flat JSON object -> tensors by the model's inputs (spec 2.1).
StatusOr<serving::InferRequest> ParseGenerateRequest(const std::string& body,
                                                     const inference::ModelConfig& config);
// One response -> one flat JSON object (spec 2.2), keys in byte order.
nlohmann::json GenerateResponseToJson(const serving::InferResponse& response);

// The ModelConfig as Triton prints it: proto field names, default values, enums by name,
// int64 as numbers.
std::string ModelConfigToJson(const inference::ModelConfig& config);

nlohmann::json MetadataToJson(const serving::ModelMetadata& m);
nlohmann::json StatisticsToJson(const std::vector<serving::ModelStatistics>& stats);

}  // namespace inflight::frontends
