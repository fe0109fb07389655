// Triton's logging extension over both protocols: one setting at a time, checked, applied
// to the process's logger. log_file is read-only over the network (501, as Triton).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "base/logging.h"
#include "base/status.h"

namespace inflight::frontends {

using LogSettingValue =
    std::variant<std::monostate, bool, uint64_t, std::string>;  // monostate: null

// Sets `key` in *settings; INVALID_ARGUMENT for an unknown key or a value of the wrong type,
// UNIMPLEMENTED for a non-null log_file.
Status ApplyLogSetting(LogSettings* settings, const std::string& key, const LogSettingValue& value);
// The settings as Triton reports them (log_file is always "": lines go to stderr).
std::map<std::string, LogSettingValue> LogSettingsView(const LogSettings& settings);

}  // namespace inflight::frontends
