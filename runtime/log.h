// Where the runtime reports what is not an error of the current call (a damaged cache entry it
// recovered from, a cache it could not write): stderr unless the embedding program says so.
#pragma once

#include <functional>
#include <string_view>

namespace kiln {

using LogHandler = std::function<void(std::string_view message)>;

// Replaces the handler (an empty one restores stderr). Thread-safe.
void set_log_handler(LogHandler handler);
void log_warning(std::string_view message);
// The same, but each distinct `subject` is reported only once per process (a cache folder that
// cannot be used, a damaged entry: said once, not at every compile).
void log_warning_once(std::string_view subject, std::string_view message);

}  // namespace kiln
