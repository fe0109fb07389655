#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace inflight {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<bool> g_info{true}, g_warning{true}, g_error{true}, g_iso8601{false};
std::atomic<uint32_t> g_verbose{0};
}  // namespace

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level));
  g_verbose.store(level == LogLevel::kDebug ? 1 : 0);
}
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

LogSettings GetLogSettings() {
  LogSettings s;
  s.info = g_info.load();
  s.warning = g_warning.load();
  s.error = g_error.load();
  s.verbose_level = g_verbose.load();
  s.iso8601 = g_iso8601.load();
  return s;
}

void SetLogSettings(const LogSettings& s) {
  g_info.store(s.info);
  g_warning.store(s.warning);
  g_error.store(s.error);
  g_verbose.store(s.verbose_level);
  g_iso8601.store(s.iso8601);
  g_level.store(static_cast<int>(s.verbose_level > 0 ? LogLevel::kDebug : LogLevel::kInfo));
}

bool LogEnabled(LogLevel level) {
  if (level < GetLogLevel()) return false;
  switch (level) {
    case LogLevel::kDebug:
      return g_verbose.load() > 0;
    case LogLevel::kInfo:
      return g_info.load();
    case LogLevel::kWarning:
      return g_warning.load();
    case LogLevel::kError:
      return g_error.load();
  }
  return true;
}

void LogLine(LogLevel level, const char* file, int line, const std::string& text) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::string out;
  out.reserve(text.size() + 80);
  if (g_iso8601.load()) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    out += stamp;
  }
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
