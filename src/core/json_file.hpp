#pragma once
// The one reader of the JSON files attn reads (model configs, the tuning file). Those files are
// untrusted: a path may name a FIFO, a device or a huge file, and the text may nest without end
// or hold numbers no C++ type can take. Everything here ends in an attn::Error that names the
// file (`what`, e.g. "tuning file '/x'"), the dotted field path and what was expected.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace attn::json_file {

/// Bounds on one file: bytes read and nesting depth (objects and arrays) parsed.
struct Limits {
  std::size_t max_bytes;
  int max_depth;
};

/// The bytes of `path`, which must be a regular file (after symlinks) of at most `max_bytes`.
/// FIFOs, devices and directories are refused without reading or blocking on them; the size is
/// checked before the read and again during it (the file may grow in between).
std::string read(const std::string& path, const std::string& what, std::size_t max_bytes);

/// Parses `text` within `limits`. Invalid JSON, too deep nesting and numbers out of a double's
/// range are errors naming `what` and the field they were in.
nlohmann::json parse(const std::string& text, const std::string& what, const Limits& limits);

/// `s` cut to `max` characters (with "..."): values reach error messages, and a string value
/// may be megabytes long.
std::string clip(const std::string& s, std::size_t max = 64);

/// A short, bounded text for `v` in error messages: scalars as JSON (long strings cut), lists and
/// objects as their kind and size; never walks nested values.
std::string preview(const nlohmann::json& v);

/// The outcome of reading a JSON number as an integer.
enum class IntegerCheck { ok, not_integer, out_of_range };

/// `v` as an integer in lo..hi into `out`; 2.0 counts as 2. A float is range-checked before any
/// conversion: converting 1e30 to an integer type is undefined behaviour.
IntegerCheck to_integer(const nlohmann::json& v, int64_t lo, int64_t hi, int64_t& out);

/// One value of a parsed file and where it sits, for typed reads whose errors say
/// "<what> field '<path>'=<value> invalid: expected <what was expected>".
class Field {
 public:
  Field(const nlohmann::json& value, std::string what, std::string path = "")
      : v_(&value), what_(std::move(what)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *v_; }
  const std::string& path() const { return path_; }

  /// Member `key` of this object; an error when this is not an object or `key` is missing or null.
  Field operator[](const std::string& key) const;
  /// Member `key` of this object, or nullopt when it is absent or null.
  std::optional<Field> find(const std::string& key) const;
  /// Element `i` of this array (checked).
  Field operator[](std::size_t i) const;

  /// An integer in lo..hi: non-numbers, fractions and values out of range are errors.
  int64_t integer(int64_t lo, int64_t hi) const;
  /// A finite number in lo..hi.
  double number(double lo, double hi) const;
  std::string string() const;
  bool boolean() const;
  /// This value, which must be an object.
  const nlohmann::json& object() const;
  /// This value, which must be an array of at most `max_size` entries.
  const nlohmann::json& array(std::size_t max_size) const;

  [[noreturn]] void fail(const std::string& expected) const;

 private:
  const nlohmann::json* v_;
  std::string what_;
  std::string path_;
};

}  // namespace attn::json_file
