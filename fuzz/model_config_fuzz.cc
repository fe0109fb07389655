// libFuzzer target: config.pbtxt text through protobuf TextFormat (ParseModelConfigText),
// the typed parameter readers the backends use, and the text and JSON printers. A model
// repository is operator input, but a load request can carry a config: nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frontends/kserve_json.h"
#include "serving/model_config_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = inflight::serving::ParseModelConfigText(text);
  if (!config.ok()) return 0;
  for (const auto& [key, value] : config->parameters()) {
    (void)inflight::serving::GetParameter(*config, key);
    (void)inflight::serving::GetIntParameter(*config, key, 0);
    (void)inflight::serving::GetDoubleParameter(*config, key, 0);
    (void)inflight::serving::GetBoolParameter(*config, key, false);
  }
  (void)inflight::serving::IsDecoupled(*config);
  (void)inflight::serving::ModelConfigToText(*config);
  (void)inflight::frontends::ModelConfigToJson(*config);
  return 0;
}
