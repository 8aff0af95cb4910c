#pragma once
// Text that comes from a backend's own code (its summary, a Reason it returns, an exception's
// message, a variant name) reaches JSON output, which refuses bytes that are not UTF-8.
#include <string>
#include <string_view>

namespace attn::detail {

/// True when `s` is UTF-8 without control characters (a tab is allowed).
bool is_plain_text(std::string_view s);
/// `s` with every byte that breaks is_plain_text replaced by '?'.
std::string plain_text(std::string_view s);

}  // namespace attn::detail
