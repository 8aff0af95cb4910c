#pragma once
/// Checked integer arithmetic for every place a caller's number becomes a size, an index or a
/// loop bound. A wrapped product is how a huge spec turns into a tiny allocation and then an
/// out-of-bounds write, so overflow and out-of-limit values are attn::Errors naming the argument.
/// Names and reasons are views: a check that passes builds no string (these run per step).
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace attn {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// The product of `factors` (each >= 0). Throws
/// `Error("<name>=a * b * c invalid: expected at most <limit> (<why>)")` when the product exceeds
/// `limit` or does not fit in 64 bits; a negative factor is named as such.
int64_t checked_product(std::string_view name, std::initializer_list<int64_t> factors, int64_t limit = kInt64Max,
                        std::string_view why = "");

int64_t checked_product(std::string_view name, const std::vector<int64_t>& factors, int64_t limit = kInt64Max,
                        std::string_view why = "");

/// The sum of `terms` (each >= 0), with the same contract as checked_product.
int64_t checked_sum(std::string_view name, std::initializer_list<int64_t> terms, int64_t limit = kInt64Max,
                    std::string_view why = "");

/// Returns `value` when lo <= value <= hi, else throws
/// `Error("<name>=<value> invalid: expected >= <lo> and <= <hi> (<why>)")` (lo = 1 reads "> 0").
int64_t check_range(std::string_view name, int64_t value, int64_t lo, int64_t hi, std::string_view why = "");

/// check_range for values stored in an int32 field (the range must lie within int32).
inline int32_t check_range32(std::string_view name, int64_t value, int64_t lo, int64_t hi, std::string_view why = "") {
  return static_cast<int32_t>(check_range(name, value, lo, hi, why));
}

}  // namespace attn
