#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace attn {
namespace {
int level() {
  static const int l = [] {
    const char* e = std::getenv("ATTN_LOG");
    if (!e) return 1;
    if (!std::strcmp(e, "error")) return 0;
    if (!std::strcmp(e, "info")) return 2;
    if (!std::strcmp(e, "debug")) return 3;
    return 1;
  }();
  return l;
}
void emit(int l, const char* tag, const std::string& msg) {
  if (l <= level()) std::fprintf(stderr, "[attn %s] %s\n", tag, msg.c_str());
}
}  // namespace

void log_warning(const std::string& msg) { emit(1, "warning", msg); }
void log_info(const std::string& msg) { emit(2, "info", msg); }
void log_debug(const std::string& msg) { emit(3, "debug", msg); }
void log_info_once(const std::string& key, const std::string& msg) {
  static std::mutex mu;
  static std::unordered_set<std::string> seen;
  std::lock_guard g(mu);
  if (seen.insert(key).second) log_info(msg);
}
}  // namespace attn
