#include "zeroshard/runtime/log.h"

#include <cstdio>
#include <memory>
#include <mutex>
#include <utility>

namespace zeroshard {
namespace {

// Never destroyed: destructors of other statics may log at process exit.
struct HandlerSlot {
  std::mutex mu;
  std::shared_ptr<const LogHandler> handler;  // null: the default
};

HandlerSlot& Slot() {
  static HandlerSlot* slot = new HandlerSlot();
  return *slot;
}

std::mutex& StderrMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// Whether this thread is inside a handler's call (Note in the header: a Log
// from there goes to the default handler).
thread_local bool in_handler = false;

void AppendEscaped(std::string& out, absl::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if ((u < 0x20 && c != '\t') || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
}

void AppendSource(std::string& out, absl::string_view source) {
  if (source.empty()) {
    out += "unknown";
    return;
  }
  for (const char c : source) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.';
    out += keep ? c : '_';
  }
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kFatal: return "fatal";
  }
  return "unknown";
}

std::string FormatLogEvent(const LogEvent& event) {
  std::string prefix = "zeroshard level=";
  prefix.append(LogLevelName(event.level).data(), LogLevelName(event.level).size());
  prefix += " source=";
  AppendSource(prefix, event.source);

  std::string out;
  out.reserve(prefix.size() + event.message.size() + 3 + event.detail.size() * 2);
  out += prefix;
  out += ": ";
  AppendEscaped(out, event.message);
  out += '\n';
  absl::string_view rest = event.detail;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const absl::string_view line = rest.substr(0, end);
    out += prefix;
    out += " |";
    if (!line.empty()) {
      out += ' ';
      AppendEscaped(out, line);
    }
    out += '\n';
    rest = end == absl::string_view::npos ? absl::string_view() : rest.substr(end + 1);
  }
  return out;
}

void DefaultLogHandler(const LogEvent& event) {
  const std::string text = FormatLogEvent(event);
  std::lock_guard<std::mutex> lock(StderrMutex());
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

LogHandler SetLogHandler(LogHandler handler) {
  std::shared_ptr<const LogHandler> next;
  if (handler) next = std::make_shared<const LogHandler>(std::move(handler));
  std::shared_ptr<const LogHandler> previous;
  {
    HandlerSlot& slot = Slot();
    std::lock_guard<std::mutex> lock(slot.mu);
    previous = std::exchange(slot.handler, std::move(next));
  }
  // A copy: a Log still running the previous handler holds its own reference.
  return previous != nullptr ? *previous : LogHandler();
}

void Log(LogLevel level, absl::string_view source, absl::string_view message,
         absl::string_view detail) {
  const LogEvent event{.level = level, .source = source, .message = message, .detail = detail};
  std::shared_ptr<const LogHandler> handler;
  if (!in_handler) {
    HandlerSlot& slot = Slot();
    std::lock_guard<std::mutex> lock(slot.mu);
    handler = slot.handler;
  }
  if (handler == nullptr) {
    DefaultLogHandler(event);
    return;
  }
  struct InHandler {
    InHandler() { in_handler = true; }
    ~InHandler() { in_handler = false; }  // also if the handler throws
  } scope;
  (*handler)(event);
}

}  // namespace zeroshard
