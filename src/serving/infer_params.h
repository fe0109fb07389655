// Request and response parameters between the serving core's ParamValue and KServe's
// InferParameter (the gRPC frontend's, and the disaggregated router's calls to other servers).
#pragma once

#include <optional>
#include <type_traits>
#include <variant>

#include "grpc_service.pb.h"
#include "serving/infer.h"

namespace inflight::serving {

// nullopt for a parameter without a value. uint64 values become int64 (as Triton's core reads
// them).
inline std::optional<ParamValue> ParamFromProto(const inference::InferParameter& v) {
  switch (v.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return v.bool_param();
    case inference::InferParameter::kInt64Param:
      return v.int64_param();
    case inference::InferParameter::kUint64Param:
      return static_cast<int64_t>(v.uint64_param());
    case inference::InferParameter::kDoubleParam:
      return v.double_param();
    case inference::InferParameter::kStringParam:
      return v.string_param();
    default:
      return std::nullopt;
  }
}

inline void ParamToProto(const ParamValue& v, inference::InferParameter* param) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          param->set_bool_param(x);
        else if constexpr (std::is_same_v<T, int64_t>)
          param->set_int64_param(x);
        else if constexpr (std::is_same_v<T, double>)
          param->set_double_param(x);
        else
          param->set_string_param(x);
      },
      v);
}

}  // namespace inflight::serving
