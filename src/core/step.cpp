#include "attn/step.hpp"

namespace attn {

void Workspace::reserve(std::size_t bytes) {
  if (bytes <= this->bytes()) return;
  // Rounded up to whole pages so a slowly growing step does not reallocate every time.
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  if (allocator_) {
    device_ = DeviceMemory();  // free first: the old scratch need not survive growth
    device_ = DeviceMemory(allocator_, rounded);
    return;
  }
  buffer_ = Buffer(DType::int8, {int64_t(rounded)});
}

std::string_view to_string(MlaForm f) {
  switch (f) {
    case MlaForm::absorbed: return "absorbed";
    case MlaForm::expanded: return "expanded";
  }
  return "?";
}

std::string StepPlan::to_string() const {
  return backend_ + " plan: " + md_.to_string() + ", cache " + cache_.to_string() +
         ", workspace " + std::to_string(workspace_bytes()) + " bytes";
}

}  // namespace attn
