#pragma once
// What the chunked mixer scans (mamba2 SSD, linear attention, gated delta net) declare alike: the
// padding of their scratch rows and the signature of their per-ISA scan.
#include <cstdint>

namespace attn::mixer {

/// A scratch row's floats: padded to 16 (mixer_tile.hpp's kPad) so the tile kernels never need
/// masked loads.
constexpr int64_t scratch_row(int64_t n) { return (n + 15) / 16 * 16; }

/// Tokens [t0, t0 + len) of heads [h0, h1), all of one key head or group; state: head h0's block
/// of the slot, the block's other heads after it. chunk == 0 or len == 1: the recurrence.
template <typename Scan>
using ChunkedScanFn = void(const Scan& a, int64_t t0, int64_t len, int64_t h0, int64_t h1, int64_t chunk, float* state,
                           float* scratch);

}  // namespace attn::mixer
