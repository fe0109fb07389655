#include "frontends/kserve_json.h"

#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstring>

#include "base/fp16.h"

namespace inflight::frontends {
namespace {

using nlohmann::json;
using serving::DataTypeFromProtocolName;
using serving::DataTypeProtocolName;
using serving::DataTypeSize;
using serving::InferTensor;

// The leaves of nested arrays in order, without recursion (the nesting depth is the
// client's; ParseJsonBounded bounds it, this does not rely on that).
void Flatten(const json& root, std::vector<const json*>* out) {
  std::vector<std::pair<const json*, size_t>> stack;  // array, next index
  if (!root.is_array()) return out->push_back(&root);
  stack.push_back({&root, 0});
  while (!stack.empty()) {
    auto& [arr, next] = stack.back();
    if (next == arr->size()) {
      stack.pop_back();
      continue;
    }
    const json& x = (*arr)[next++];
    if (x.is_array()) {
      stack.push_back({&x, 0});
    } else {
      out->push_back(&x);
    }
  }
}

// JSON `data` -> raw bytes of `dtype`.
Status EncodeData(const json& data, InferTensor* t) {
  if (t->num_elements() < 0) {
    return InvalidArgumentError("input '" + t->name +
                                "': the element count of its shape overflows");
  }
  std::vector<const json*> flat;
  Flatten(data, &flat);
  if (static_cast<int64_t>(flat.size()) != t->num_elements()) {
    return InvalidArgumentError("unable to parse 'data': expected " +
                                std::to_string(t->num_elements()) + " elements for input '" +
                                t->name + "', got " + std::to_string(flat.size()));
  }
  const std::string bad =
      "unable to parse 'data' of input '" + t->name + "' as " + DataTypeProtocolName(t->dtype);
  if (t->dtype == inference::TYPE_STRING) {
    for (const json* e : flat) {
      if (!e->is_string()) return InvalidArgumentError(bad);
      serving::AppendBytesElement(&t->data, e->get_ref<const std::string&>());
    }
    return OkStatus();
  }
  std::vector<double> values;
  const bool is_int = t->dtype != inference::TYPE_FP16 && t->dtype != inference::TYPE_FP32 &&
                      t->dtype != inference::TYPE_FP64 && t->dtype != inference::TYPE_BF16;
  for (const json* e : flat) {
    if (t->dtype == inference::TYPE_BOOL) {
      if (!e->is_boolean()) return InvalidArgumentError(bad);
      values.push_back(e->get<bool>() ? 1 : 0);
      continue;
    }
    if (!e->is_number()) return InvalidArgumentError(bad);
    if (is_int && !e->is_number_integer()) return InvalidArgumentError(bad);
    if (t->dtype == inference::TYPE_UINT64 && e->is_number_unsigned()) {
      values.push_back(static_cast<double>(e->get<uint64_t>()));
    } else if (is_int && e->is_number_integer()) {
      const int64_t v = e->get<int64_t>();
      if ((t->dtype == inference::TYPE_UINT8 || t->dtype == inference::TYPE_UINT16 ||
           t->dtype == inference::TYPE_UINT32 || t->dtype == inference::TYPE_UINT64) &&
          v < 0) {
        return InvalidArgumentError(bad);
      }
      values.push_back(static_cast<double>(v));
    } else {
      values.push_back(e->get<double>());
    }
  }
  // INT64 values beyond 2^53 would lose bits through double; take them exactly.
  if (t->dtype == inference::TYPE_INT64 || t->dtype == inference::TYPE_UINT64) {
    for (const json* e : flat) {
      const int64_t v =
          e->is_number_unsigned() ? static_cast<int64_t>(e->get<uint64_t>()) : e->get<int64_t>();
      t->data.append(reinterpret_cast<const char*>(&v), 8);
    }
    return OkStatus();
  }
  *t = InferTensor::FromDoubles(t->name, t->dtype, t->shape, values);
  return OkStatus();
}

StatusOr<serving::ParamValue> JsonToParam(const std::string& key, const json& v) {
  if (v.is_boolean()) return serving::ParamValue(v.get<bool>());
  if (v.is_number_integer())
    return serving::ParamValue(v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>())
                                                      : v.get<int64_t>());
  if (v.is_number_float()) return serving::ParamValue(v.get<double>());
  if (v.is_string()) return serving::ParamValue(v.get<std::string>());
  return InvalidArgumentError(
      "parameter '" + key + "' has invalid type. It should be either 'int', 'bool', or 'string'.");
}

json ParamToJson(const serving::ParamValue& p) {
  return std::visit([](const auto& v) { return json(v); }, p);
}

json TensorValues(const InferTensor& t) {
  json arr = json::array();
  if (t.dtype == inference::TYPE_STRING) {
    auto s = t.AsStrings();
    if (s.ok()) {
      for (const std::string& x : *s) arr.push_back(x);
    }
    return arr;
  }
  if (t.dtype == inference::TYPE_BOOL) {
    for (char c : t.data) arr.push_back(c != 0);
    return arr;
  }
  if (t.dtype == inference::TYPE_INT64 || t.dtype == inference::TYPE_UINT64 ||
      t.dtype == inference::TYPE_INT32 || t.dtype == inference::TYPE_INT16 ||
      t.dtype == inference::TYPE_INT8 || t.dtype == inference::TYPE_UINT8 ||
      t.dtype == inference::TYPE_UINT16 || t.dtype == inference::TYPE_UINT32) {
    auto v = t.AsInt64();
    if (v.ok()) {
      for (int64_t x : *v) arr.push_back(x);
    }
    return arr;
  }
  auto v = t.AsDouble();
  if (v.ok()) {
    for (double x : *v) arr.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  }
  return arr;
}

}  // namespace

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

StatusOr<json> ParseJsonBounded(std::string_view text, int max_depth) {
  // nlohmann's dump and our walks recurse per level: refuse deep documents before parsing.
  if (JsonNestingDepth(text) > max_depth) {
    return InvalidArgumentError("failed to parse the request JSON buffer: nesting deeper than " +
                                std::to_string(max_depth) + " levels");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return InvalidArgumentError("failed to parse the request JSON buffer: invalid JSON");
  return j;
}

StatusOr<std::optional<SharedMemoryRef>> SharedMemoryRefFromJson(const json& parameters,
                                                                 const std::string& tensor) {
  if (!parameters.is_object() || !parameters.contains("shared_memory_region"))
    return std::optional<SharedMemoryRef>();
  SharedMemoryRef ref;
  const json& region = parameters["shared_memory_region"];
  if (!region.is_string())
    return InvalidArgumentError("'" + tensor + "': shared_memory_region must be a string");
  ref.region = region.get<std::string>();
  auto unsigned_param = [&](const char* key, bool required, uint64_t* out) -> Status {
    if (!parameters.contains(key)) {
      return required ? InvalidArgumentError("'" + tensor + "': shared_memory_region needs " + key)
                      : OkStatus();
    }
    const json& v = parameters[key];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
      return InvalidArgumentError("'" + tensor + "': " + key + " must be a non-negative integer");
    }
    *out = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    return OkStatus();
  };
  Status s = unsigned_param("shared_memory_byte_size", true, &ref.byte_size);
  if (s.ok()) s = unsigned_param("shared_memory_offset", false, &ref.offset);
  if (!s.ok()) return s;
  return std::optional<SharedMemoryRef>(ref);
}

StatusOr<ParsedInfer> ParseInferRequest(const std::string& body, int64_t header_length,
                                        const SharedMemoryReader* shm) {
  if (header_length == 0) {
    return UnimplementedError(
        "raw binary requests (Inference-Header-Content-Length: 0) are not supported");
  }
  if (header_length > static_cast<int64_t>(body.size())) {
    return InvalidArgumentError("Inference-Header-Content-Length " + std::to_string(header_length) +
                                " is larger than the request body");
  }
  const size_t json_len = header_length < 0 ? body.size() : static_cast<size_t>(header_length);
  auto parsed = ParseJsonBounded(std::string_view(body).substr(0, json_len));
  if (!parsed.ok()) return parsed.status();
  json& j = *parsed;
  if (!j.is_object()) return InvalidArgumentError("the request body must be a JSON object");
  ParsedInfer p;
  serving::InferRequest& r = p.request;
  if (j.contains("id")) {
    if (!j["id"].is_string()) return InvalidArgumentError("'id' must be a string");
    r.id = j["id"].get<std::string>();
  }
  if (j.contains("parameters")) {
    if (!j["parameters"].is_object()) return InvalidArgumentError("'parameters' must be an object");
    for (const auto& [k, v] : j["parameters"].items()) {
      if (k.rfind("triton_", 0) == 0) {
        return InvalidArgumentError(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should not "
            "be specified.");
      }
      if (k == "binary_data_output") {
        p.binary_output_default = v.is_boolean() && v.get<bool>();
        continue;
      }
      auto pv = JsonToParam(k, v);
      if (!pv.ok()) return pv.status();
      r.parameters[k] = *pv;
    }
  }
  if (!j.contains("inputs") || !j["inputs"].is_array()) {
    return InvalidArgumentError("missing 'inputs' array in the request");
  }
  size_t offset = json_len;
  for (const json& in : j["inputs"]) {
    if (!in.is_object() || !in.contains("name") || !in["name"].is_string()) {
      return InvalidArgumentError("every input needs a string 'name'");
    }
    InferTensor t;
    t.name = in["name"].get<std::string>();
    if (!in.contains("datatype") || !in["datatype"].is_string()) {
      return InvalidArgumentError("input '" + t.name + "' is missing a string 'datatype'");
    }
    t.dtype = DataTypeFromProtocolName(in["datatype"].get<std::string>());
    if (t.dtype == inference::TYPE_INVALID) {
      return InvalidArgumentError("input '" + t.name + "' has an unknown datatype '" +
                                  in["datatype"].get<std::string>() + "'");
    }
    if (!in.contains("shape") || !in["shape"].is_array()) {
      return InvalidArgumentError("input '" + t.name + "' is missing a 'shape' array");
    }
    for (const json& d : in["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return InvalidArgumentError("input '" + t.name +
                                    "': shape must hold non-negative integers");
      }
      t.shape.push_back(d.get<int64_t>());
    }
    const json no_parameters = json::object();
    auto shm_ref = SharedMemoryRefFromJson(
        in.contains("parameters") ? in["parameters"] : no_parameters, t.name);
    if (!shm_ref.ok()) return shm_ref.status();
    if (shm_ref->has_value()) {
      if (!shm)
        return InvalidArgumentError("input '" + t.name +
                                    "': shared memory is not available on this endpoint");
      auto data = (*shm)(**shm_ref);
      if (!data.ok()) return data.status();
      t.data = std::move(data).value();
      r.inputs.push_back(std::move(t));
      continue;
    }
    int64_t binary_size = -1;
    if (in.contains("parameters") && in["parameters"].is_object() &&
        in["parameters"].contains("binary_data_size")) {
      const json& b = in["parameters"]["binary_data_size"];
      if (!b.is_number_integer() || b.get<int64_t>() < 0) {
        return InvalidArgumentError("input '" + t.name +
                                    "': binary_data_size must be a non-negative integer");
      }
      binary_size = b.get<int64_t>();
    }
    if (binary_size >= 0) {
      if (header_length < 0) {
        return InvalidArgumentError(
            "input '" + t.name +
            "' has binary_data_size but the request has no Inference-Header-Content-Length");
      }
      if (static_cast<uint64_t>(binary_size) > body.size() - offset) {
        return InvalidArgumentError("unexpected size for input '" + t.name +
                                    "': the binary data is shorter than binary_data_size");
      }
      t.data = body.substr(offset, binary_size);
      offset += binary_size;
    } else {
      if (!in.contains("data"))
        return InvalidArgumentError("input '" + t.name +
                                    "' has neither 'data' nor binary_data_size");
      Status s = EncodeData(in["data"], &t);
      if (!s.ok()) return s;
    }
    r.inputs.push_back(std::move(t));
  }
  if (j.contains("outputs")) {
    if (!j["outputs"].is_array()) return InvalidArgumentError("'outputs' must be an array");
    for (const json& out : j["outputs"]) {
      if (!out.is_object() || !out.contains("name") || !out["name"].is_string()) {
        return InvalidArgumentError("every requested output needs a string 'name'");
      }
      const std::string name = out["name"].get<std::string>();
      r.requested_outputs.push_back(name);
      if (out.contains("parameters")) {
        auto shm_ref = SharedMemoryRefFromJson(out["parameters"], name);
        if (!shm_ref.ok()) return shm_ref.status();
        if (shm_ref->has_value()) p.shm_outputs[name] = **shm_ref;
      }
      if (out.contains("parameters") && out["parameters"].is_object() &&
          out["parameters"].contains("binary_data")) {
        const json& b = out["parameters"]["binary_data"];
        p.binary_output[name] = b.is_boolean() && b.get<bool>();
      }
    }
  }
  return p;
}

json InferResponseToJson(const serving::InferResponse& resp, const ParsedInfer& req,
                         std::string* binary) {
  if (!resp.error.ok()) return json{{"error", resp.error.message()}};
  json j;
  j["model_name"] = resp.model_name;
  j["model_version"] = resp.model_version;
  if (!resp.id.empty()) j["id"] = resp.id;
  if (!resp.parameters.empty()) {
    for (const auto& [k, v] : resp.parameters) j["parameters"][k] = ParamToJson(v);
  }
  j["outputs"] = json::array();
  for (const InferTensor& t : resp.outputs) {
    json o;
    o["name"] = t.name;
    o["datatype"] = DataTypeProtocolName(t.dtype);
    o["shape"] = t.shape;
    auto it = req.binary_output.find(t.name);
    const bool as_binary = it != req.binary_output.end() ? it->second : req.binary_output_default;
    if (auto shm = req.shm_outputs.find(t.name); shm != req.shm_outputs.end()) {
      o["parameters"]["shared_memory_region"] = shm->second.region;
      if (shm->second.offset != 0) o["parameters"]["shared_memory_offset"] = shm->second.offset;
      o["parameters"]["shared_memory_byte_size"] = t.data.size();
    } else if (as_binary) {
      o["parameters"]["binary_data_size"] = t.data.size();
      binary->append(t.data);
    } else {
      o["data"] = TensorValues(t);
    }
    j["outputs"].push_back(std::move(o));
  }
  return j;
}

StatusOr<serving::InferRequest> ParseGenerateRequest(const std::string& body,
                                                     const inference::ModelConfig& config) {
  auto parsed = ParseJsonBounded(body);
  if (!parsed.ok()) return parsed.status();
  json& j = *parsed;
  if (!j.is_object()) return InvalidArgumentError("the generate request must be a JSON object");
  serving::InferRequest r;
  auto find_input = [&](const std::string& name) -> const inference::ModelInput* {
    for (const auto& in : config.input()) {
      if (in.name() == name) return &in;
    }
    return nullptr;
  };
  if (find_input("parameters") && j.contains("parameters") && j["parameters"].is_object()) {
    return InvalidArgumentError(
        "Keyword 'parameters' for nested schema also given as input tensor name");
  }
  if (j.contains("id")) {
    if (!j["id"].is_string()) return InvalidArgumentError("'id' must be a string");
    r.id = j["id"].get<std::string>();
  }
  auto add = [&](const std::string& key, const json& value) -> Status {
    const inference::ModelInput* in = find_input(key);
    if (!in) {
      auto pv = JsonToParam(key, value);
      if (!pv.ok()) return pv.status();
      r.parameters[key] = *pv;
      return OkStatus();
    }
    if (value.is_array()) {
      for (const json& e : value) {
        if (e.is_array() || e.is_object()) {
          return InvalidArgumentError("The schema can not convert input '" + key +
                                      "' to tensor with proper shape");
        }
      }
    } else if (value.is_object() || value.is_null()) {
      return InvalidArgumentError("The schema can not convert input '" + key +
                                  "' to tensor with proper shape");
    }
    const int64_t count = value.is_array() ? static_cast<int64_t>(value.size()) : 1;
    // Shape: metadata dims with the batch dim; fixed dims divide the count, the innermost -1
    // takes the rest, every other -1 becomes 1.
    std::vector<int64_t> shape;
    if (config.max_batch_size() > 0) shape.push_back(-1);
    shape.insert(shape.end(), in->dims().begin(), in->dims().end());
    int64_t rest = count;
    for (int64_t d : shape) {
      if (d > 0) {
        if (rest % d != 0)
          return InvalidArgumentError("The schema can not convert input '" + key +
                                      "' to tensor with proper shape");
        rest /= d;
      }
    }
    bool innermost = true;
    for (auto it = shape.rbegin(); it != shape.rend(); ++it) {
      if (*it == -1) {
        *it = innermost ? rest : 1;
        if (innermost) rest = 1;
        innermost = false;
      }
    }
    if (rest != 1)
      return InvalidArgumentError("The schema can not convert input '" + key +
                                  "' to tensor with proper shape");
    InferTensor t;
    t.name = key;
    t.dtype = in->data_type();
    t.shape = shape;
    Status s = EncodeData(value, &t);
    if (!s.ok()) return s;
    r.inputs.push_back(std::move(t));
    return OkStatus();
  };
  for (const auto& [k, v] : j.items()) {
    if (k == "parameters" && v.is_object()) {
      for (const auto& [pk, pv] : v.items()) {
        Status s = add(pk, pv);
        if (!s.ok()) return s;
      }
      continue;
    }
    if (k == "id" && !find_input("id")) {
      r.parameters["id"] = v.get<std::string>();
      continue;
    }
    Status s = add(k, v);
    if (!s.ok()) return s;
  }
  return r;
}

json GenerateResponseToJson(const serving::InferResponse& resp) {
  if (!resp.error.ok()) return json{{"error", resp.error.message()}};
  json j = json::object();  // std::map underneath: keys in byte order
  j["model_name"] = resp.model_name;
  j["model_version"] = resp.model_version;
  if (!resp.id.empty()) j["id"] = resp.id;
  for (const auto& [k, v] : resp.parameters) {
    if (!j.contains(k)) j[k] = ParamToJson(v);
  }
  for (const InferTensor& t : resp.outputs) {
    if (j.contains(t.name)) continue;
    json values = TensorValues(t);
    j[t.name] = values.size() == 1 ? values[0] : values;
  }
  return j;
}

std::string ModelConfigToJson(const inference::ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(config, &out, options);
  // Triton prints int64 fields as numbers; protobuf's printer quotes them.
  json j = json::parse(out, nullptr, false);
  std::function<void(json&)> fix = [&](json& x) {
    if (x.is_object() || x.is_array()) {
      for (auto& e : x) fix(e);
    } else if (x.is_string()) {
      const std::string& s = x.get_ref<const std::string&>();
      if (!s.empty() && s.size() < 20 &&
          (std::isdigit(static_cast<unsigned char>(s[0])) || (s[0] == '-' && s.size() > 1)) &&
          s.find_first_not_of("-0123456789", 1) == std::string::npos &&
          s.find('-', 1) == std::string::npos) {
        x = std::stoll(s);
      }
    }
  };
  // Only fields that are int64 in the schema, so string parameters stay strings.
  for (auto* key : {"input", "output"}) {
    if (j.contains(key)) {
      for (auto& io : j[key]) {
        if (io.contains("dims")) fix(io["dims"]);
        if (io.contains("reshape")) fix(io["reshape"]);
      }
    }
  }
  if (j.contains("dynamic_batching")) {
    auto& d = j["dynamic_batching"];
    for (auto* key :
         {"max_queue_delay_microseconds", "priority_levels", "default_priority_level"}) {
      if (d.contains(key)) fix(d[key]);
    }
    if (d.contains("default_queue_policy"))
      fix(d["default_queue_policy"]["default_timeout_microseconds"]);
  }
  if (j.contains("ensemble_scheduling")) {
    for (auto& s : j["ensemble_scheduling"]["step"]) fix(s["model_version"]);
  }
  if (j.contains("version_policy") && j["version_policy"].contains("specific"))
    fix(j["version_policy"]["specific"]);
  return Dump(j);
}

json MetadataToJson(const serving::ModelMetadata& m) {
  json j;
  j["name"] = m.name;
  j["versions"] = m.versions;
  j["platform"] = m.platform;
  auto tensors = [](const std::vector<serving::TensorMetadata>& ts) {
    json a = json::array();
    for (const auto& t : ts)
      a.push_back({{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}});
    return a;
  };
  j["inputs"] = tensors(m.inputs);
  j["outputs"] = tensors(m.outputs);
  return j;
}

json StatisticsToJson(const std::vector<serving::ModelStatistics>& stats) {
  auto d = [](const serving::Duration& x) { return json{{"count", x.count}, {"ns", x.ns}}; };
  json arr = json::array();
  for (const auto& s : stats) {
    json m;
    m["name"] = s.name;
    m["version"] = s.version;
    m["last_inference"] = s.last_inference_ms;
    m["inference_count"] = s.inference_count;
    m["execution_count"] = s.execution_count;
    m["inference_stats"] = {{"success", d(s.success)},
                            {"fail", d(s.fail)},
                            {"queue", d(s.queue)},
                            {"compute_input", d(s.compute_input)},
                            {"compute_infer", d(s.compute_infer)},
                            {"compute_output", d(s.compute_output)},
                            {"cache_hit", d(s.cache_hit)},
                            {"cache_miss", d(s.cache_miss)}};
    json rs = json::object();
    for (const auto& [i, r] : s.response_stats) {
      rs[std::to_string(i)] = {{"compute_infer", d(r.compute_infer)},
                               {"compute_output", d(r.compute_output)},
                               {"success", d(r.success)},
                               {"fail", d(r.fail)},
                               {"empty_response", d(r.empty_response)},
                               {"cancel", d(r.cancel)}};
    }
    m["response_stats"] = rs;
    m["batch_stats"] = json::array();
    if (s.batch1_infer.count > 0) {
      m["batch_stats"].push_back({{"batch_size", 1},
                                  {"compute_input", d(s.batch1_input)},
                                  {"compute_infer", d(s.batch1_infer)},
                                  {"compute_output", d(s.batch1_output)}});
    }
    m["memory_usage"] = json::array();
    arr.push_back(std::move(m));
  }
  return json{{"model_stats", arr}};
}

}  // namespace inflight::frontends
