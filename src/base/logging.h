// Minimal leveled logging to stderr. Thread-safe (one write per line).
#pragma once

#include <sstream>
#include <string>

namespace inflight {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, const char* file, int line, const std::string& text);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace inflight

#define INFLIGHT_LOG(level)                                                        \
  if (::inflight::LogLevel::level < ::inflight::GetLogLevel()) {                   \
  } else                                                                           \
    ::inflight::LogMessage(::inflight::LogLevel::level, __FILE__, __LINE__).stream()
