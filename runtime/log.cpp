// The runtime's warning channel.
#include "runtime/log.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace kiln {

namespace {
std::mutex& log_mu() {
  static std::mutex mu;
  return mu;
}
LogHandler& handler() {
  static LogHandler h;
  return h;
}
}  // namespace

void set_log_handler(LogHandler h) {
  std::lock_guard<std::mutex> lock(log_mu());
  handler() = std::move(h);
}

void log_warning(std::string_view message) {
  std::lock_guard<std::mutex> lock(log_mu());
  if (handler()) {
    handler()(message);
    return;
  }
  std::fprintf(stderr, "kiln: warning: %.*s\n", static_cast<int>(message.size()), message.data());
}

void log_warning_once(std::string_view subject, std::string_view message) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.emplace(subject).second) return;
  }
  log_warning(message);
}

}  // namespace kiln
