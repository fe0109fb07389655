#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace inflight {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void LogLine(LogLevel level, const char* file, int line, const std::string& text) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::string out;
  out.reserve(text.size() + 48);
  out += kLetters[static_cast<int>(level)];
  out += ' ';
  out += base;
  out += ':';
  out += std::to_string(line);
  out += "] ";
  out += text;
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace inflight
