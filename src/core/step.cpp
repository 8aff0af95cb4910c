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
constexpr std::size_t kKeptScratchBytes = std::size_t(64) << 20;
struct Kept {
  Workspace ws;
  bool leased = false;
};
Kept& kept() {
  thread_local Kept k;
  return k;
}
}  // namespace

KeptScratch::KeptScratch(DeviceKind device, std::size_t bytes) {
  Kept& k = kept();
  if (device != DeviceKind::cpu || bytes > kKeptScratchBytes || k.leased) return;
  k.leased = true;
  ws_ = &k.ws;
}

KeptScratch::~KeptScratch() {
  if (ws_) kept().leased = false;
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
