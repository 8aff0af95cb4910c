#pragma once
// Enum <-> name tables shared by every parse/print pair, so each enum's names live in one place.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/error.hpp"
#include "attn/types.hpp"

namespace attn::detail {

template <typename E>
using NameTable = std::vector<std::pair<E, std::string_view>>;

/// A fixed table for an enum whose values run 0..last, checked at compile time by covers_enum.
template <typename E, std::size_t N>
using NameArray = std::array<std::pair<E, std::string_view>, N>;

/// Whether `table` names each value 0..`last` once, in order. A static_assert on it next to the
/// table makes an enumerator added without its name fail the build.
template <typename E, std::size_t N>
constexpr bool covers_enum(const NameArray<E, N>& table, E last) {
  if (N != std::size_t(last) + 1) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (std::size_t(table[i].first) != i || table[i].second.empty()) return false;
  return true;
}

// The helpers below take either kind of table (NameTable or NameArray).
template <typename Table>
using table_enum_t = typename Table::value_type::first_type;

template <typename Table>
std::string_view name_of(const Table& table, table_enum_t<Table> value) {
  for (auto& [v, n] : table) if (v == value) return n;
  return "?";
}

template <typename Table>
std::vector<std::string> names_of(const Table& table) {
  std::vector<std::string> out;
  for (auto& [v, n] : table) out.emplace_back(n);
  return out;
}

/// Looks `name` up; unknown → "Invalid <what>: '<name>'. Valid values are: a, b, c".
template <typename Table>
table_enum_t<Table> parse_name(const Table& table, std::string_view name, std::string_view what) {
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

template <typename Table>
std::vector<table_enum_t<Table>> values_of(const Table& table) {
  std::vector<table_enum_t<Table>> out;
  for (auto& [v, n] : table) out.push_back(v);
  return out;
}

}  // namespace attn::detail
