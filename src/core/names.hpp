#pragma once
// Enum <-> name tables shared by every parse/print pair, so each enum's names live in one place.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/error.hpp"
#include "attn/types.hpp"

namespace attn::detail {

template <typename E>
using NameTable = std::vector<std::pair<E, std::string_view>>;

template <typename E>
std::string_view name_of(const NameTable<E>& table, E value) {
  for (auto& [v, n] : table) if (v == value) return n;
  return "?";
}

template <typename E>
std::vector<std::string> names_of(const NameTable<E>& table) {
  std::vector<std::string> out;
  for (auto& [v, n] : table) out.emplace_back(n);
  return out;
}

/// Looks `name` up; unknown → "Invalid <what>: '<name>'. Valid values are: a, b, c".
template <typename E>
E parse_name(const NameTable<E>& table, std::string_view name, std::string_view what) {
  for (auto& [v, n] : table) if (n == name) return v;
  throw Error("Invalid " + std::string(what) + ": '" + std::string(name) + "'. Valid values are: " + join(names_of(table)));
}

/// Backend names compare ignoring ASCII case (vLLM spells them upper-case: CPU_FLASH).
inline bool same_backend_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}
/// "" or "auto" (any case): no backend forced.
inline bool is_auto_backend(std::string_view s) { return s.empty() || same_backend_name(s, "auto"); }

template <typename E>
std::vector<E> values_of(const NameTable<E>& table) {
  std::vector<E> out;
  for (auto& [v, n] : table) out.push_back(v);
  return out;
}

}  // namespace attn::detail
