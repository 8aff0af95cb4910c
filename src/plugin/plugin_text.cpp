// UTF-8 checks for text a backend supplies (see plugin_text.hpp).
#include "plugin/plugin_text.hpp"

namespace attn::detail {
namespace {

// The length of the well-formed character at s[i], or 0 when the byte there starts none (a
// control character counts as none). Well-formed as RFC 3629 and nlohmann's serializer define it:
// no overlong forms, no surrogates, nothing past U+10FFFF (0xC0 0x80 once passed here and made
// JSON output throw).
std::size_t char_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return c >= ' ' || c == '\t' ? 1 : 0;
  const std::size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  // The second byte's range narrows after E0 (no overlong), ED (no surrogates), F0 and F4.
  const auto c1 = static_cast<unsigned char>(s[i + 1]);
  const unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
  if (c1 < lo || c1 > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
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
