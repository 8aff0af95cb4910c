// KVCache's writes: checked writes of a step's new K / V into their slots (store: one vectorised
// run per (block, KV head), kv/store_run.hpp), block copies and fills.
#include "attn/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"
#include "cpu/threads.hpp"
#include "kv/store_run.hpp"
#include "kv/kv_entry.hpp"

namespace attn {
namespace {
using kv::entry_width;
using kv::is_ds_mla;

// One fp8_ds_mla entry from a [kRank + kRope] row of any float dtype.
void store_ds_mla_row(const void* src, DType sd, void* entry) {
  float row[ds_mla::kRank + ds_mla::kRope];
  for (int i = 0; i < ds_mla::kRank + ds_mla::kRope; ++i) row[i] = load_as_float(src, sd, i);
  ds_mla::quantize_entry(row, entry);
}

}  // namespace

void KVCache::check_write_tensors(const TensorView& k, const TensorView& v, const BatchMetadata& md) const {
  ATTN_REQUIRE(!device_, "cache.device", "cuda",
               "a host cache (a device cache is written by its backend's run: ForwardArgs::new_k / new_v)");
  const bool mla = spec_.layout == KVLayout::MLA;
  const int64_t n = md.num_tokens;
  check_tensor(k, "k", 3, {DType::float32, DType::float16, DType::bfloat16}, {n, spec_.num_kv_heads, spec_.head_size});
  if (!mla)
    check_tensor(v, "v", 3, {DType::float32, DType::float16, DType::bfloat16}, {n, spec_.num_kv_heads, spec_.v_width()});
}

void KVCache::write(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  check_write_tensors(k, v, md);
  const int64_t n = md.num_tokens;
  ATTN_REQUIRE(int64_t(md.slot_mapping.size()) == n, "metadata.slot_mapping.size()", md.slot_mapping.size(),
               "num_tokens = " + std::to_string(n));
  check_slot_mapping(md.slot_mapping, int64_t(spec_.num_blocks) * spec_.block_size);
  store(k, v, md);
}

void KVCache::write_validated(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  // Runs per layer per step (run() with new K/V): O(1) checks, messages built only on failure.
  check_write_tensors(k, v, md);
  ATTN_REQUIRE(md.block_size == spec_.block_size, "metadata.block_size", md.block_size,
               "the cache's block_size " + std::to_string(spec_.block_size));
  ATTN_REQUIRE(int64_t(md.slot_mapping.size()) == md.num_tokens, "metadata.slot_mapping.size()", md.slot_mapping.size(),
               "num_tokens = " + std::to_string(md.num_tokens));
  store(k, v, md);
}

void KVCache::store(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  const bool mla = spec_.layout == KVLayout::MLA;
  const int64_t n = md.num_tokens;
  const PagedKV pv = view();
  const int64_t* slots = md.slot_mapping.data();
  const std::size_t kes = dtype_size(k.dtype), ves = mla ? 0 : dtype_size(v.dtype);
  if (pv.ds_mla) {  // one latent head; each entry carries its own tile scales, so nothing saturates
    char* base = static_cast<char*>(pv.base);
    for (int64_t t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      const int64_t blk = slots[t] / spec_.block_size, off = slots[t] % spec_.block_size;
      store_ds_mla_row(static_cast<const char*>(k.data) + t * k.strides[0] * int64_t(kes), k.dtype,
                       base + blk * pv.block_stride + off * pv.token_stride);
    }
    return;
  }
  // Work items: chunks of kChunk tokens (whole 16-token K lines) x KV heads; inside a chunk, runs
  // of consecutive slots in one block go to the store routine at once. Slots are distinct
  // (BatchMetadata::validate), so items never write the same bytes.
  // int4 HND_PAIRS V bytes hold two keys' codes: one item per KV head writes all of them.
  const int64_t kChunk = pv.int4 && pv.layout == KVLayout::HND_PAIRS ? std::max<int64_t>(n, 1) : 64;
  const int32_t heads = spec_.num_kv_heads, hs = spec_.head_size, hv = spec_.v_width();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t bytes = n * heads * (hs + (mla ? 0 : hv)) * int64_t(dtype_size(spec_.dtype));
  const int team = bytes >= (int64_t(1) << 20) ? cpu::team_size() : 1;  // small writes: threads cost more than they save
  // Bulk writes (>= 4 MiB: a 1024-token prompt of a Llama-3.1-8B layer) stream whole lines past the
  // caches: a regular store first reads the line it overwrites, which held the prompt's write to
  // 0.4-0.6 of a copy (Zen 4, Zen 5). Smaller writes (decode tokens, short prompts) stay in cache for the attend.
  const bool stream = bytes >= (int64_t(4) << 20);
  const kv::StoreRunFn store_run = kv::store_run();
  const int32_t bs = spec_.block_size;
  int64_t saturated = 0;
#pragma omp parallel for collapse(2) schedule(static) num_threads(team) reduction(+ : saturated) if (team > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    for (int32_t h = 0; h < heads; ++h) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      const float k_inv = 1.0f / k_scales_[std::size_t(h)], v_inv = 1.0f / v_scales_[std::size_t(h)];
      for (int64_t t = c * kChunk; t < end;) {
        const int64_t slot = slots[t];
        if (slot < 0) {
          ++t;
          continue;
        }
        const int64_t blk = slot / bs;
        const int32_t off = int32_t(slot % bs);
        int32_t len = 1;
        while (t + len < end && off + len < bs && slots[t + len] == slot + len) ++len;
        const kv::RowSource ks{static_cast<const char*>(k.data) + (t * k.strides[0] + h * k.strides[1]) * int64_t(kes),
                               k.strides[0] * int64_t(kes), k.dtype};
        saturated += store_run(pv, ks, blk, off, len, h, false, hs, k_inv, stream);
        if (!mla) {
          const kv::RowSource vs{static_cast<const char*>(v.data) + (t * v.strides[0] + h * v.strides[1]) * int64_t(ves),
                                 v.strides[0] * int64_t(ves), v.dtype};
          saturated += store_run(pv, vs, blk, off, len, h, true, hv, v_inv, stream);
        }
        t += len;
      }
    }
  }
  saturated_ += saturated;
}

void KVCache::copy_block(int32_t src, int32_t dst) {
  require(src >= 0 && src < spec_.num_blocks, "src_block", src, "a block id in [0, " + std::to_string(spec_.num_blocks) + ")");
  require(dst >= 0 && dst < spec_.num_blocks, "dst_block", dst, "a block id in [0, " + std::to_string(spec_.num_blocks) + ")");
  const PagedKV pv = view();
  if (src == dst) return;
  if (spec_.token_scales()) {  // the block's slots keep their scales
    const std::size_t n = std::size_t(spec_.block_size) * std::size_t(spec_.num_kv_heads);
    for (float* s : {k_token_scales_, v_token_scales_})
      std::memmove(s + std::size_t(dst) * n, s + std::size_t(src) * n, n * sizeof(float));
  }
  if (strided()) {  // rows at the engine's strides: only the addressed elements move
    const std::size_t es = dtype_size(spec_.dtype);
    char* b = static_cast<char*>(pv.base);
    for (bool is_v : {false, true})
      for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
        for (int32_t t = 0; t < spec_.block_size; ++t)
          std::memmove(b + kv_element_offset(pv, dst, t, h, 0, is_v) * int64_t(es), b + kv_element_offset(pv, src, t, h, 0, is_v) * int64_t(es),
                       std::size_t(spec_.stored_width(is_v)) * es);
    return;
  }
  const std::size_t bytes = std::size_t(pv.block_stride) * dtype_size(spec_.dtype);
  char* base = static_cast<char*>(data());
  if (device_) {
    device_.allocator()->copy(base + std::size_t(dst) * bytes, base + std::size_t(src) * bytes, bytes, CopyKind::device_to_device);
  } else {
    std::memmove(base + std::size_t(dst) * bytes, base + std::size_t(src) * bytes, bytes);
  }
}

void KVCache::fill(float value) {
  if (spec_.token_scales()) {  // every code 1 and every scale `value`: each element reads `value`
    // (int4: each stored, rotated value, zero point 0; a NaN poison reads NaN everywhere).
    const int64_t per = int64_t(spec_.num_blocks) * spec_.block_size * spec_.num_kv_heads;
    const float stored = spec_.int4() ? int4_head::scale_of(value) : value;
    std::fill(k_token_scales_, k_token_scales_ + per, stored);
    std::fill(v_token_scales_, v_token_scales_ + per, stored);
    if (spec_.int4()) {  // every nibble 1, in any layout
      if (!strided()) {
        std::memset(data(), 0x11, bytes());
        return;
      }
      const PagedKV pv = view();
      for (bool is_v : {false, true})
        for (int32_t b = 0; b < spec_.num_blocks; ++b)
          for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
            for (int32_t t = 0; t < spec_.block_size; ++t)
              std::memset(static_cast<char*>(pv.base) + kv_element_offset(pv, b, t, h, 0, is_v), 0x11, std::size_t(spec_.stored_width(is_v)));
      return;
    }
    value = 1.0f;
  }
  if (spec_.turboquant()) {  // every slot as write_kv stores a vector of `value`: a NaN poison reads NaN
    const PagedKV pv = view();
    const int32_t d = spec_.head_size;
    std::vector<float> x(static_cast<std::size_t>(d), value);
    std::vector<uint8_t> slot(static_cast<std::size_t>(entry_width(spec_)), 0);
    turboquant::quantize_key(x.data(), d, pv.tq, slot.data(), nullptr);
    turboquant::quantize_value(x.data(), d, pv.tq, slot.data() + pv.v_offset, nullptr);
    for (int64_t i = 0; i < int64_t(bytes()); i += int64_t(slot.size())) std::memcpy(static_cast<char*>(data()) + i, slot.data(), slot.size());
    return;
  }
  if (spec_.nvfp4()) {  // every code 1.0 and every block scale e4m3(value): a NaN poison reads NaN
    const PagedKV pv = view();
    for (bool is_v : {false, true}) {
      const int32_t w = is_v ? spec_.v_width() : spec_.head_size;
      uint8_t row[nvfp4::row_bytes(limits::kMaxHeadSize)];
      std::memset(row, 0x22, std::size_t(w / 2));
      std::memset(row + w / 2, f32_to_fp8_e4m3(value), std::size_t(w / nvfp4::kGroup));
      for (int32_t b = 0; b < spec_.num_blocks; ++b)
        for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
          for (int32_t t = 0; t < spec_.block_size; ++t)
            std::memcpy(static_cast<char*>(pv.base) + kv_element_offset(pv, b, t, h, 0, is_v), row, std::size_t(nvfp4::row_bytes(w)));
    }
    return;
  }
  if (strided()) {  // only the elements the cache addresses: the memory between may be the engine's
    const PagedKV pv = view();
    for (bool is_v : {false, true})
      for (int32_t b = 0; b < spec_.num_blocks; ++b)
        for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
          for (int32_t t = 0; t < spec_.block_size; ++t)
            for (int32_t d = 0, n = is_v ? spec_.v_width() : spec_.head_size; d < n; ++d)
              store_from_float(pv.base, spec_.dtype, kv_element_offset(pv, b, t, h, d, is_v), value);
    return;
  }
  Buffer host = device_ ? Buffer(spec_.dtype, spec_.shape()) : Buffer();
  void* dst = device_ ? host.data() : data();
  const int64_t n = int64_t(bytes() / dtype_size(spec_.dtype));
  if (is_ds_mla(spec_)) {
    // Every entry holds `value` (latent with scale 1, rope in bf16), so a NaN poison stays NaN.
    uint8_t entry[ds_mla::kEntryBytes];
    const float one = 1.0f;
    const uint16_t rope = f32_to_bf16(value);
    std::memset(entry, f32_to_fp8_e4m3(value), ds_mla::kRank);
    for (int t = 0; t < ds_mla::kTiles; ++t) std::memcpy(entry + ds_mla::kScalesOffset + 4 * t, &one, 4);
    for (int i = 0; i < ds_mla::kRope; ++i) std::memcpy(entry + ds_mla::kRopeOffset + 2 * i, &rope, 2);
    for (int64_t i = 0; i < n; i += ds_mla::kEntryBytes) std::memcpy(static_cast<uint8_t*>(dst) + i, entry, sizeof entry);
  } else {
    for (int64_t i = 0; i < n; ++i) store_from_float(dst, spec_.dtype, i, value);
  }
  if (device_) device_.allocator()->copy(data(), host.data(), bytes(), CopyKind::host_to_device);
}

}  // namespace attn
