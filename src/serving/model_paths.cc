#include "serving/model_paths.h"

#include <filesystem>

namespace inflight::serving {

namespace fs = std::filesystem;

bool IsValidModelName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\') return false;
  }
  return true;
}

std::vector<std::string> CanonicalRoots(const std::vector<std::string>& folders) {
  std::vector<std::string> roots;
  for (const std::string& f : folders) {
    std::error_code ec;
    const fs::path p = fs::canonical(f, ec);
    if (!ec) roots.push_back(p.string());
  }
  return roots;
}

StatusOr<std::string> ConfinedPath(const std::string& param, const std::string& value,
                                   const std::string& model_dir,
                                   const std::vector<std::string>& roots) {
  if (value.empty() || value.find('\0') != std::string::npos) {
    return InvalidArgumentError("parameter " + param + ": not a valid path");
  }
  fs::path p(value);
  if (p.is_relative()) p = fs::path(model_dir) / p;
  // weakly_canonical resolves the links of the part that exists, so a link inside the
  // repository that points out of it is seen for what it is.
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(p, ec);
  bool inside = false;
  if (!ec) {
    const std::string r = resolved.string();
    for (const std::string& root : roots) {
      inside = inside || r == root ||
               (r.size() > root.size() && r.compare(0, root.size(), root) == 0 &&
                (root.back() == '/' || r[root.size()] == '/'));
    }
  }
  if (!inside) {
    return InvalidArgumentError(
        "parameter " + param +
        " names a path outside the model repository and the allowed model folders");
  }
  if (!fs::exists(resolved, ec))
    return NotFoundError("parameter " + param + ": '" + value + "' does not exist");
  return resolved.string();
}

StatusOr<std::string> OwnFolderPath(const std::string& param, const std::string& value,
                                    const std::string& model_dir,
                                    const std::vector<std::string>& roots) {
  const fs::path p = fs::path(value).is_absolute() ? fs::path(value) : fs::path(model_dir) / value;
  std::error_code ec;
  if (fs::exists(p, ec)) {
    auto dir = ConfinedPath(param, p.string(), model_dir, roots);
    if (!dir.ok()) return dir;
    // A folder of its own: not a root, not a model's folder (a writer such as the disk tier
    // deletes what it finds broken in it).
    const fs::path model_folder = fs::weakly_canonical(model_dir, ec);
    bool own = fs::is_directory(*dir, ec) && !fs::exists(fs::path(*dir) / "config.pbtxt", ec) &&
               fs::path(*dir) != model_folder && fs::path(*dir) != model_folder.parent_path();
    for (const std::string& root : roots) own = own && fs::path(*dir) != root;
    if (!own) {
      return InvalidArgumentError("parameter " + param +
                                  " must name a folder of its own inside the repository "
                                  "(not a model's folder or the repository itself)");
    }
    return dir;
  }
  const std::string leaf = p.filename().string();
  if (leaf.empty() || leaf == "." || leaf == "..")
    return InvalidArgumentError("parameter " + param + " must name a directory");
  auto parent = ConfinedPath(param, p.parent_path().string(), model_dir, roots);
  if (!parent.ok()) return parent.status();
  const fs::path dir = fs::path(*parent) / leaf;
  fs::create_directory(dir, ec);
  if (ec) return InvalidArgumentError("parameter " + param + ": cannot create the directory");
  return dir.string();
}

}  // namespace inflight::serving
