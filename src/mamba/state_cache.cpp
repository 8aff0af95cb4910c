// MambaStateCache: per-slot conv and recurrent states, float32, zero-initialised.
#include <algorithm>
#include <cstring>

#include "attn/error.hpp"
#include "attn/mamba.hpp"

namespace attn {

namespace {
int64_t per_slot(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}
// A Buffer of no elements is never allocated; its view still carries the declared shape.
Buffer make_buffer(const std::vector<int64_t>& shape) {
  if (per_slot(shape) * shape[0] == 0) return Buffer();
  Buffer b(DType::float32, shape);
  std::memset(b.data(), 0, b.bytes());
  return b;
}
}  // namespace

MambaStateCache::MambaStateCache(const MixerConfig& config, int32_t num_slots) : config_(config), num_slots_(num_slots) {
  config_.validate();
  require(num_slots > 0, "num_slots", num_slots, "> 0");
  conv_per_slot_ = per_slot(config_.conv_state_shape(num_slots));
  ssm_per_slot_ = per_slot(config_.ssm_state_shape(num_slots));
  conv_ = make_buffer(config_.conv_state_shape(num_slots));
  ssm_ = make_buffer(config_.ssm_state_shape(num_slots));
}

TensorView MambaStateCache::conv_state() const {
  return TensorView::contiguous(conv_.data(), DType::float32, config_.conv_state_shape(num_slots_));
}

TensorView MambaStateCache::ssm_state() const {
  return TensorView::contiguous(ssm_.data(), DType::float32, config_.ssm_state_shape(num_slots_));
}

void MambaStateCache::check_slot(int32_t slot, const char* arg) const {
  ATTN_REQUIRE(slot >= 0 && slot < num_slots_, arg, slot, "a state slot in [0, " + std::to_string(num_slots_) + ")");
}

float* MambaStateCache::conv_slot(int32_t slot) const {
  check_slot(slot, "slot");
  return static_cast<float*>(conv_.data()) + int64_t(slot) * conv_per_slot_;
}

float* MambaStateCache::ssm_slot(int32_t slot) const {
  check_slot(slot, "slot");
  return static_cast<float*>(ssm_.data()) + int64_t(slot) * ssm_per_slot_;
}

void MambaStateCache::reset_slot(int32_t slot) {
  check_slot(slot, "slot");
  if (conv_per_slot_) std::fill_n(conv_slot(slot), conv_per_slot_, 0.0f);
  if (ssm_per_slot_) std::fill_n(ssm_slot(slot), ssm_per_slot_, 0.0f);
}

void MambaStateCache::copy_slot(int32_t src, int32_t dst) {
  check_slot(src, "src");
  check_slot(dst, "dst");
  if (src == dst) return;
  if (conv_per_slot_) std::copy_n(conv_slot(src), conv_per_slot_, conv_slot(dst));
  if (ssm_per_slot_) std::copy_n(ssm_slot(src), ssm_per_slot_, ssm_slot(dst));
}

void MambaStateCache::fill(float value) {
  if (conv_.bytes()) std::fill_n(static_cast<float*>(conv_.data()), conv_per_slot_ * num_slots_, value);
  if (ssm_.bytes()) std::fill_n(static_cast<float*>(ssm_.data()), ssm_per_slot_ * num_slots_, value);
}

}  // namespace attn
