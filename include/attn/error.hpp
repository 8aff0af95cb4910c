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

/// Throws `Error("<argument>=<value> invalid: expected <expected>")` unless `ok`.
template <typename V>
inline void require(bool ok, const std::string& argument, const V& value, const std::string& expected) {
  if (!ok) {
    throw Error(argument + "=" + detail::to_text(value) + " invalid: expected " + expected);
  }
}

}  // namespace attn
