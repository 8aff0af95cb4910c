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

template <typename E>
std::vector<E> values_of(const NameTable<E>& table) {
  std::vector<E> out;
  for (auto& [v, n] : table) out.push_back(v);
  return out;
}

}  // namespace attn::detail
