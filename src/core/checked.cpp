#include "attn/checked.hpp"

#include "attn/error.hpp"

namespace attn {
namespace {

// The operands as one contiguous run, whether they came as an initializer list or a vector.
struct Operands {
  const int64_t* first;
  const int64_t* last;
  const int64_t* begin() const { return first; }
  const int64_t* end() const { return last; }
  std::size_t size() const { return std::size_t(last - first); }
};

std::string expression(Operands operands, const char* op) {
  std::string s;
  for (int64_t v : operands) s += (s.empty() ? "" : op) + std::to_string(v);
  return s;
}

std::string expectation(int64_t limit, std::string_view why) {
  return "at most " + std::to_string(limit) + (why.empty() ? "" : " (" + std::string(why) + ")");
}

// Shared by product and sum: folds the operands with `step` (a __builtin_*_overflow), then
// reports the whole expression, so the caller's message shows every number that went into it.
template <typename Step>
int64_t fold(std::string_view name, Operands operands, const char* op, int64_t identity,
             int64_t limit, std::string_view why, Step step) {
  const bool single = operands.size() == 1;
  for (int64_t v : operands) {
    if (v < 0) throw Error(std::string(name) + "=" + expression(operands, op) + " invalid: expected non-negative operands");
  }
  int64_t acc = identity;
  bool overflow = false;
  for (int64_t v : operands) overflow = overflow || step(acc, v, &acc);
  if (overflow || acc > limit) {
    const std::string value = single ? std::to_string(acc)
                                     : expression(operands, op) + (overflow ? " (beyond 64 bits)" : " = " + std::to_string(acc));
    throw Error(std::string(name) + "=" + value + " invalid: expected " + expectation(limit, why));
  }
  return acc;
}

bool multiply(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

}  // namespace

int64_t checked_product(std::string_view name, std::initializer_list<int64_t> factors, int64_t limit,
                        std::string_view why) {
  return fold(name, {factors.begin(), factors.end()}, " * ", 1, limit, why, multiply);
}

int64_t checked_product(std::string_view name, const std::vector<int64_t>& factors, int64_t limit, std::string_view why) {
  return fold(name, {factors.data(), factors.data() + factors.size()}, " * ", 1, limit, why, multiply);
}

int64_t checked_sum(std::string_view name, std::initializer_list<int64_t> terms, int64_t limit, std::string_view why) {
  return fold(name, {terms.begin(), terms.end()}, " + ", 0, limit, why,
              [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); });
}

int64_t check_range(std::string_view name, int64_t value, int64_t lo, int64_t hi, std::string_view why) {
  if (value < lo || value > hi) {
    // "> 0" reads better than ">= 1" and is how every other size check in attn words it.
    const std::string low = lo == 1 ? "> 0" : ">= " + std::to_string(lo);
    throw Error(std::string(name) + "=" + std::to_string(value) + " invalid: expected " + low + " and <= " + std::to_string(hi) +
                (why.empty() ? "" : " (" + std::string(why) + ")"));
  }
  return value;
}

}  // namespace attn
