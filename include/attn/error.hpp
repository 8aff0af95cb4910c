#pragma once
/// attn::Error — the one exception type attn throws for bad input or unsupported requests.
/// Messages name the argument, the value received and what was expected.
#include <sstream>
#include <stdexcept>
#include <string>

namespace attn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename T>
std::string to_text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail

/// Throws `Error("<argument>=<value> invalid: expected <expected>")`.
template <typename V>
[[noreturn]] void fail_check(const std::string& argument, const V& value, const std::string& expected) {
  throw Error(argument + "=" + detail::to_text(value) + " invalid: expected " + expected);
}

/// Throws `Error("<argument>=<value> invalid: expected <expected>")` unless `ok`. The strings are
/// built by the caller before the call; on hot paths use ATTN_REQUIRE, which builds them only
/// when the check fails.
template <typename V>
inline void require(bool ok, const std::string& argument, const V& value, const std::string& expected) {
  if (!ok) [[unlikely]] fail_check(argument, value, expected);
}

}  // namespace attn

/// require() whose argument / value / expectation expressions are evaluated only on failure, so a
/// check that passes costs one branch (metadata validation runs over every block-table entry).
#define ATTN_REQUIRE(ok, argument, value, expected)                          \
  do {                                                                       \
    if (!(ok)) [[unlikely]] ::attn::fail_check((argument), (value), (expected)); \
  } while (0)
