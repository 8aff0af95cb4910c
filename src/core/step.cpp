#include "attn/step.hpp"

#include <limits>

#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "core/names.hpp"

namespace attn {

void Workspace::reserve(std::size_t bytes) {
  if (bytes <= this->bytes()) return;
  // Checked before the page rounding below, which would wrap a size near 2^64 to 0 bytes; host
  // scratch against the memory budget, device scratch against what the rounding can hold.
  if (allocator_)
    require(bytes <= std::numeric_limits<std::size_t>::max() - 4095, "workspace bytes", bytes, "a size below 2^64 - 4096");
  else
    check_memory("workspace bytes", bytes, memory_budget(), "scratch for one run: StepPlan::workspace_bytes()");
  // Rounded up to whole pages so a slowly growing step does not reallocate every time.
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  if (allocator_) {
    device_ = DeviceMemory();  // free first: the old scratch need not survive growth
    device_ = DeviceMemory(allocator_, rounded);
    return;
  }
  buffer_ = Buffer(DType::int8, {int64_t(rounded)});
}

namespace {
constexpr detail::NameArray<MlaForm, 2> kMlaFormNames = {{{MlaForm::absorbed, "absorbed"}, {MlaForm::expanded, "expanded"}}};
static_assert(detail::covers_enum(kMlaFormNames, kLastMlaForm));
}  // namespace

std::string_view to_string(MlaForm f) { return detail::name_of(kMlaFormNames, f); }
MlaForm parse_mla_form(std::string_view name) { return detail::parse_name(kMlaFormNames, name, "mla_form"); }

std::string StepPlan::to_string() const {
  return backend_ + " plan: " + md_.to_string() + ", cache " + cache_.to_string() +
         ", workspace " + std::to_string(workspace_bytes()) + " bytes";
}

}  // namespace attn
