#pragma once
// Minimal logging to stderr, level from ATTN_LOG (error|warning|info|debug; default warning).
#include <string>

namespace attn {
void log_warning(const std::string& msg);
void log_info(const std::string& msg);
void log_debug(const std::string& msg);
/// Logs `msg` at info level once per distinct `key` for the process.
void log_info_once(const std::string& key, const std::string& msg);
}  // namespace attn
