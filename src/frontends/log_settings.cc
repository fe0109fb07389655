#include "frontends/log_settings.h"

namespace inflight::frontends {

Status ApplyLogSetting(LogSettings* s, const std::string& key, const LogSettingValue& v) {
  if (key == "log_file") {
    if (std::holds_alternative<std::monostate>(v)) return OkStatus();
    return UnimplementedError("log file location can not be updated through network protocol");
  }
  auto flag = [&](bool* out) -> Status {
    if (!std::holds_alternative<bool>(v))
      return InvalidArgumentError("expect boolean for '" + key + "'");
    *out = std::get<bool>(v);
    return OkStatus();
  };
  if (key == "log_info") return flag(&s->info);
  if (key == "log_warning") return flag(&s->warning);
  if (key == "log_error") return flag(&s->error);
  if (key == "log_verbose_level") {
    if (!std::holds_alternative<uint64_t>(v) || std::get<uint64_t>(v) > UINT32_MAX) {
      return InvalidArgumentError("expect unsigned integer for 'log_verbose_level'");
    }
    s->verbose_level = static_cast<uint32_t>(std::get<uint64_t>(v));
    return OkStatus();
  }
  if (key == "log_format") {
    const std::string* f = std::get_if<std::string>(&v);
    if (!f || (*f != "default" && *f != "ISO8601")) {
      return InvalidArgumentError("log_format must be 'default' or 'ISO8601'");
    }
    s->iso8601 = *f == "ISO8601";
    return OkStatus();
  }
  return InvalidArgumentError("unknown logging setting '" + key + "'");
}

std::map<std::string, LogSettingValue> LogSettingsView(const LogSettings& s) {
  return {{"log_file", std::string()},
          {"log_info", s.info},
          {"log_warning", s.warning},
          {"log_error", s.error},
          {"log_verbose_level", static_cast<uint64_t>(s.verbose_level)},
          {"log_format", std::string(s.iso8601 ? "ISO8601" : "default")}};
}

}  // namespace inflight::frontends
