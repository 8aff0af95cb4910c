#pragma once
/// What the cuda_flash kernels are built for. The descriptor (core) and the kernels (module) both
/// read these constants, so the declared capabilities cannot drift from what is instantiated.
/// Plain constexpr only: this header is compiled by g++ (core) and nvcc (module).

namespace attn::cuda_flash {

// Head sizes: kMinHead..kMaxHead in steps of kHeadStep. The prefill kernel pads K's width to a
// multiple of 16 (one mma k-step) in shared memory and instantiates three register tiers
// (kHeadTiers); the decode kernel takes the head size at run time.
inline constexpr int kMinHead = 64;
inline constexpr int kMaxHead = 256;
inline constexpr int kHeadStep = 8;
inline constexpr int kHeadTiers[] = {64, 128, 256};

// Paged blocks: any multiple of 16 tokens (the kernels walk tokens, not blocks, so 16 is only
// the granularity vLLM's GPU allocator uses; it keeps a tile's rows inside few blocks).
inline constexpr int kBlockMultiple = 16;

// mma.sync m16n8k16 with bf16 inputs needs sm_80; the module is built for these archs.
inline constexpr int kMinCcMajor = 8;
inline constexpr int kMinCcMinor = 0;
inline constexpr int kBuiltArchs[] = {80, 89, 90};

// Query heads served by one CTA (a slice of one KV head's group): GQA groups larger than this
// are split over several CTAs, each reloading the KV tile (L2 absorbs most of it).
inline constexpr int kMaxHeadsPerCta = 8;

}  // namespace attn::cuda_flash
