// Why a callback parse: nlohmann's parser itself is iterative, but the DOM it builds is later
// printed, compared and copied by recursive code. Stopping at max_depth while parsing keeps every
// later walk shallow, and the callback also tells us which field a failure was in.
#include "core/json_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "attn/error.hpp"

namespace attn::json_file {
namespace {

using nlohmann::json;

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
  return out;
}

/// "<what> field 'a.b'", or just "<what>" for the top level.
std::string located(const std::string& what, const std::string& path) {
  return path.empty() ? what : what + " field '" + path + "'";
}

std::string too_big(const std::string& what, std::size_t size, std::size_t max_bytes) {
  std::string s = what + " size " + std::to_string(size) + " bytes invalid: expected at most ";
  s += std::to_string(max_bytes) + " bytes";
  return s;
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& what, mode_t mode) {
  throw Error(what + " is " + file_kind(mode) + ": expected a regular file");
}

[[noreturn]] void cannot_read(const std::string& what, int err) {
  throw Error(what + " cannot be read: " + std::strerror(err));
}

/// Closes the descriptor on every path out of read().
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// nlohmann's text without its "[json.exception.parse_error.101] " prefix.
std::string reason(const json::exception& e) {
  const std::string text = e.what();
  const auto end = text.find("] ");
  return text.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? text.substr(end + 2) : text;
}

/// The number in nlohmann's "number overflow parsing '1e400'".
std::string overflowed_token(const json::exception& e) {
  const std::string text = e.what();
  const auto first = text.find('\''), last = text.rfind('\'');
  return first != std::string::npos && last > first ? clip(text.substr(first + 1, last - first - 1)) : "?";
}

}  // namespace

std::string read(const std::string& path, const std::string& what, std::size_t max_bytes) {
  // stat() follows symlinks, so a link to /dev/zero is refused as the device it names.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) cannot_read(what, errno);
  if (!S_ISREG(st.st_mode)) not_regular(what, st.st_mode);
  if (std::uintmax_t(st.st_size) > max_bytes) throw Error(too_big(what, std::size_t(st.st_size), max_bytes));
  // The path may be swapped for a FIFO after the stat: O_NONBLOCK keeps open() from waiting for
  // a writer, and fstat() on the descriptor checks what was really opened.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) cannot_read(what, errno);
  if (::fstat(f.fd, &st) != 0) cannot_read(what, errno);
  if (!S_ISREG(st.st_mode)) not_regular(what, st.st_mode);
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) cannot_read(what, errno);
    if (n == 0) break;
    text.append(chunk, std::size_t(n));
    if (text.size() > max_bytes) throw Error(too_big(what, text.size(), max_bytes));
  }
  return text;
}

json parse(const std::string& text, const std::string& what, const Limits& limits) {
  if (text.size() > limits.max_bytes) throw Error(too_big(what, text.size(), limits.max_bytes));
  // path[d] is the key last seen at depth d+1: the field a failing value belongs to.
  std::vector<std::string> path;
  auto track = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key) {
      path.resize(std::size_t(depth));
      if (depth > 0) path.back() = clip(parsed.get_ref<const std::string&>());
    } else if (event == json::parse_event_t::object_end || event == json::parse_event_t::array_end) {
      // The closed value's own key stays; keys inside it no longer locate anything.
      if (path.size() > std::size_t(depth)) path.resize(std::size_t(depth));
    } else if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
               depth >= limits.max_depth) {
      throw Error(located(what, dotted(path)) + " nests deeper than " + std::to_string(limits.max_depth) +
                  " levels: expected at most " + std::to_string(limits.max_depth) +
                  " levels of nested objects and lists");
    }
    return true;
  };
  try {
    return json::parse(text, track);
  } catch (const json::out_of_range& e) {
    if (e.id != 406) throw Error(what + " is not valid JSON: " + reason(e));
    throw Error(located(what, dotted(path)) + "=" + overflowed_token(e) +
                " invalid: out of range, expected a number a double can hold (magnitude below 1.8e308)");
  } catch (const json::exception& e) {
    const std::string where = path.empty() ? "" : " (in field '" + dotted(path) + "')";
    throw Error(what + " is not valid JSON" + where + ": " + reason(e));
  }
}

std::string clip(const std::string& s, std::size_t max) { return s.size() <= max ? s : s.substr(0, max) + "..."; }

std::string preview(const json& v) {
  switch (v.type()) {
    case json::value_t::array: return "a list of " + std::to_string(v.size()) + " entries";
    case json::value_t::object: return "an object of " + std::to_string(v.size()) + " fields";
    case json::value_t::string: {
      const std::string text = clip(v.get_ref<const std::string&>());
      return "\"" + text + "\"";
    }
    default: return v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

IntegerCheck to_integer(const json& v, int64_t lo, int64_t hi, int64_t& out) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > uint64_t(hi)) return IntegerCheck::out_of_range;
    x = int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double f = v.get<double>();
    // Both tests before the cast: double(hi) may round up past int64's range (2^63).
    if (!(f >= double(lo) && f <= double(hi))) return IntegerCheck::out_of_range;
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) return IntegerCheck::out_of_range;
    x = int64_t(f);
    if (double(x) != f) return IntegerCheck::not_integer;
  } else {
    return IntegerCheck::not_integer;
  }
  if (x < lo || x > hi) return IntegerCheck::out_of_range;
  out = x;
  return IntegerCheck::ok;
}

Field Field::operator[](const std::string& key) const {
  if (auto f = find(key)) return *f;
  throw Error(located(what_, path_.empty() ? clip(key) : path_ + "." + clip(key)) + " is missing");
}

std::optional<Field> Field::find(const std::string& key) const {
  object();
  const auto it = v_->find(key);
  if (it == v_->end() || it->is_null()) return std::nullopt;
  return Field(*it, what_, path_.empty() ? clip(key) : path_ + "." + clip(key));
}

Field Field::operator[](std::size_t i) const {
  if (!v_->is_array() || i >= v_->size()) fail("a list of more than " + std::to_string(i) + " entries");
  return Field((*v_)[i], what_, path_ + "[" + std::to_string(i) + "]");
}

int64_t Field::integer(int64_t lo, int64_t hi) const {
  int64_t x = 0;
  switch (to_integer(*v_, lo, hi, x)) {
    case IntegerCheck::ok: return x;
    case IntegerCheck::not_integer: fail("an integer");
    case IntegerCheck::out_of_range: fail("an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  fail("an integer");
}

double Field::number(double lo, double hi) const {
  if (!v_->is_number()) fail("a number");
  const double x = v_->get<double>();
  if (!(std::isfinite(x) && x >= lo && x <= hi)) fail("a number in " + preview(lo) + ".." + preview(hi));
  return x;
}

std::string Field::string() const {
  if (!v_->is_string()) fail("a string");
  return v_->get<std::string>();
}

bool Field::boolean() const {
  if (!v_->is_boolean()) fail("true or false");
  return v_->get<bool>();
}

const json& Field::object() const {
  if (!v_->is_object()) fail("an object");
  return *v_;
}

const json& Field::array(std::size_t max_size) const {
  if (!v_->is_array()) fail("a list");
  if (v_->size() > max_size) fail("a list of at most " + std::to_string(max_size) + " entries");
  return *v_;
}

void Field::fail(const std::string& expected) const {
  const std::string where = path_.empty() ? what_ + " top-level value" : located(what_, path_);
  throw Error(where + "=" + preview(*v_) + " invalid: expected " + expected);
}

}  // namespace attn::json_file
