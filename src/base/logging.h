// Minimal leveled logging to stderr. Thread-safe (one write per line).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace inflight {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Triton's logging settings (the /v2/logging extension): which severities are written, the
// verbose level (> 0 writes debug lines) and the line format. Thread-safe.
struct LogSettings {
  bool info = true, warning = true, error = true;
  uint32_t verbose_level = 0;
  bool iso8601 = false;  // "ISO8601" format: lines start with a UTC timestamp
};
LogSettings GetLogSettings();
void SetLogSettings(const LogSettings& settings);
// Whether a line of this severity is written now.
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const char* file, int line, const std::string& text);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace inflight

#define INFLIGHT_LOG(level)                                   \
  if (!::inflight::LogEnabled(::inflight::LogLevel::level)) { \
  } else                                                      \
    ::inflight::LogMessage(::inflight::LogLevel::level, __FILE__, __LINE__).stream()
