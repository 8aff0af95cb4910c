// UTF-8 checks for text a backend supplies (see plugin_text.hpp).
#include "plugin/plugin_text.hpp"

namespace attn::detail {
namespace {

// The length of the well-formed character at s[i], or 0 when the byte there starts none (a
// control character counts as none). Overlong forms pass: JSON only needs the byte structure.
std::size_t char_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return c >= ' ' || c == '\t' ? 1 : 0;
  const std::size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  return len;
}

}  // namespace

bool is_plain_text(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = char_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string plain_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = char_length(s, i);
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace attn::detail
