// What a client may name in the model control plane: model names (no path separators, "..",
// NUL or control characters) and the files a config names (inside the model repository or an
// allow-listed folder, after resolving links). Errors never echo a path outside those.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace inflight::serving {

// Printable, 1..255 bytes, no '/', '\\', NUL or control character, not "." or "..".
bool IsValidModelName(std::string_view name);

// The canonical form of each folder (links resolved); folders that do not exist are left out.
std::vector<std::string> CanonicalRoots(const std::vector<std::string>& folders);

// `value` of parameter `param` resolved against `model_dir` (when relative) with every link
// resolved; INVALID_ARGUMENT (naming the parameter, not the path) when it lies outside every
// root, NOT_FOUND (with the value as written) when it is inside but missing.
StatusOr<std::string> ConfinedPath(const std::string& param, const std::string& value,
                                   const std::string& model_dir,
                                   const std::vector<std::string>& roots);

// A folder the server writes (e.g. kv_cache_disk_path): `value` resolved against `model_dir`,
// inside a root (checked before anything is created), a folder of its own (not a root, not a
// model's folder), created when missing. INVALID_ARGUMENT naming `param` otherwise.
StatusOr<std::string> OwnFolderPath(const std::string& param, const std::string& value,
                                    const std::string& model_dir,
                                    const std::vector<std::string>& roots);

}  // namespace inflight::serving
