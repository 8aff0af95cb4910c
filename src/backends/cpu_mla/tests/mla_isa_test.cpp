// cpu_mla / cpu_sparse under every attend kernel this CPU runs
// (ATTN_CPU_ISA=amx|avx512_bf16|avx512|generic):
// the same fp64 oracles, the variant naming the kernel that ran, and the AMX kernel's edges
// (partial 16-row groups, causal limits inside a 32-key chunk, hi/lo-split f32 q, fp8 caches),
// and fp8_ds_mla's tile scales on the bf16-dot kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/attn.hpp"
#include "attn/numeric.hpp"
#include "kernels/gather/mla_bf16.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

/// The attend kernels this CPU runs, best first.
std::vector<mla::Isa> isas_here() {
  return family_isas_here({mla::Isa::amx, mla::Isa::avx512_bf16, mla::Isa::avx512, mla::Isa::generic});
}

void expect_matches(const MlaCaseSpec& spec, const std::string& want_variant) {
  MlaCase c = make_mla_case(spec);
  EXPECT_EQ(c.impl->variant().substr(0, want_variant.size()), want_variant) << c.impl->variant();
  run_mla_forward(c);
  const CompareResult r = compare_values(tensor_values(c.out), mla_absorbed_reference(c),
                                         spec.dtype, c.cache->spec().dtype);
  EXPECT_TRUE(r.ok) << want_variant << " " << spec.describe() << ": " << r.message << " (max abs err " << r.max_abs_err << ")";
}

MlaCaseSpec base(const std::string& backend, DType io, KVCacheDType kv, uint64_t seed) {
  MlaCaseSpec s;
  s.backend = backend;
  s.dtype = io;
  s.kv_cache_dtype = kv;
  s.seed = seed;
  s.num_heads = 20;  // one full 16-row group and a partial one
  // decode, chunked prefill crossing 32-key chunks mid-way, fresh prefill, one-token sequence
  s.seqs = {{37, 1}, {50, 13}, {0, 29}, {1, 1}};
  s.kv_scale = 0.05f;
  if (backend == "cpu_sparse") s.topk = 40;
  return s;
}

TEST(CpuMlaIsa, EveryKernelMatchesTheOracle) {
  const uint64_t seed = fresh_seed();
  for_each_cpu_isa(isas_here(), [&](mla::Isa isa) {
    for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
      for (DType io : {DType::bfloat16, DType::float32, DType::float16}) {
        for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::bfloat16, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2,
                                KVCacheDType::fp8_ds_mla}) {
          const MlaCaseSpec spec = base(backend, io, kv, seed);
          const DType storage = kv_storage_dtype(kv, io);
          // AMX and bf16-dot serve bf16 / fp8 caches, bf16-dot fp8_ds_mla entries too (per-tile
          // scales); a float32 or float16 cache, and fp8_ds_mla under AMX, run the avx512 kernel.
          const bool dot_kernel = isa == mla::Isa::amx || isa == mla::Isa::avx512_bf16;
          const bool avx512_only = !mla::amx_handles_storage(storage) || (isa == mla::Isa::amx && kv == KVCacheDType::fp8_ds_mla);
          const mla::Isa ran = dot_kernel && avx512_only ? mla::Isa::avx512 : isa;
          expect_matches(spec, std::string(mla::variant_name(ran)));
        }
      }
    }
  });
}

TEST(CpuMlaIsa, DeepSeekHeadsLongContextAndThreads) {
  const uint64_t seed = fresh_seed();
  for_each_cpu_isa(isas_here(), [&](mla::Isa isa) {
    if (isa == mla::Isa::generic) return;  // the long cases are slow without SIMD
    for (int heads : {1, 16, 128}) {
      for (int threads : {1, 2}) {
        MlaCaseSpec spec = base("cpu_mla", DType::bfloat16, KVCacheDType::auto_, seed + heads + threads);
        spec.num_heads = heads;
        spec.num_threads = threads;
        spec.seqs = {{700, 1}, {33, 40}};  // a split decode and a prefill chunk of 40 tokens
        // Blocks of 64 hold whole 32-key chunks (AMX reads their K tiles in place); 48 mixes both.
        spec.block_size = threads == 1 ? 64 : 48;
        expect_matches(spec, std::string(mla::variant_name(isa)));
      }
    }
    MlaCaseSpec sparse = base("cpu_sparse", DType::bfloat16, KVCacheDType::fp8_e4m3, seed);
    sparse.num_heads = 128;
    sparse.seqs = {{1500, 2}};
    sparse.topk = 1100;
    sparse.num_threads = 2;
    expect_matches(sparse, std::string(mla::variant_name(isa)));
  });
}

TEST(CpuMlaIsa, DsMlaTileScalesOnTheBf16DotKernel) {
  const std::vector<mla::Isa> isas = family_isas_here({mla::Isa::avx512_bf16});
  if (isas.empty()) GTEST_SKIP() << "this CPU runs no avx512_bf16 build";
  const uint64_t seed = fresh_seed();
  // Per entry, tiles 2^-7 .. 1 times the uniform values (another pattern per token, so a scale
  // taken from the wrong key or tile is off by up to 2^7), and tile 2 all zero: an exact zero
  // output there.
  constexpr int kZeroTile = 2;
  auto shape = [](int token, float* e) {
    for (int t = 0; t < ds_mla::kTiles; ++t) {
      const float gain = t == kZeroTile ? 0.0f : std::ldexp(1.0f, (token * 5 + t * 3) % 8 - 7);
      for (int i = 0; i < ds_mla::kTile; ++i) e[t * ds_mla::kTile + i] *= gain;
    }
  };
  for_each_cpu_isa(isas, [&](mla::Isa) {
    for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
      for (DType io : {DType::bfloat16, DType::float32, DType::float16}) {
        for (int heads : {1, 20, 128}) {
          if (io != DType::bfloat16 && heads != 20) continue;
          MlaCaseSpec spec = base(backend, io, KVCacheDType::fp8_ds_mla, seed + heads);
          spec.num_heads = heads;
          spec.seqs = {{37, 1}, {50, 13}, {0, 29}, {1, 1}, {150, 3}};  // the last crosses 64-key chunks
          spec.shape_entry = shape;
          MlaCase c = make_mla_case(spec);
          ASSERT_EQ(c.impl->variant().substr(0, 11), "avx512_bf16") << c.impl->variant() << " " << spec.describe();
          const PagedKV kv = c.cache->view();
          mla::AttendArgs args;
          args.kv = &kv, args.width = spec.rank + spec.rope, args.rank = spec.rank;
          ASSERT_TRUE(mla::bf16_handles(args)) << "the bf16-dot kernel hands fp8_ds_mla entries on";
          run_mla_forward(c);
          const std::vector<double> got = tensor_values(c.out);
          const CompareResult r = compare_values(got, mla_absorbed_reference(c), io, kv.dtype);
          EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message << " (max abs err " << r.max_abs_err << ")";
          for (size_t at = size_t(kZeroTile) * ds_mla::kTile; at < got.size(); at += size_t(spec.rank))
            for (int i = 0; i < ds_mla::kTile; ++i) ASSERT_EQ(got[at + size_t(i)], 0.0) << "zero tile, value " << at + size_t(i);
        }
      }
    }
  });
}

TEST(CpuMlaIsa, Fp8WidensToBf16ExactlyOnTheBf16DotKernel) {
  if (family_isas_here({mla::Isa::avx512_bf16}).empty()) GTEST_SKIP() << "this CPU runs no avx512_bf16 build";
  // Every byte twice, 512 + 7 values: the vector body and the scalar tail.
  std::vector<uint8_t> src(519);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + i / 256);
  for (bool e5m2 : {false, true}) {
    std::vector<uint16_t> dst(src.size(), 0xdead);
    mla::bf16dot::fp8_to_bf16(src.data(), e5m2, int(src.size()), dst.data());
    for (size_t i = 0; i < src.size(); ++i) {
      const float want = e5m2 ? fp8_e5m2_to_f32(src[i]) : fp8_e4m3_to_f32(src[i]), got = bf16_to_f32(dst[i]);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << "byte " << int(src[i]) << " e5m2 " << e5m2;
      else EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want)) << "byte " << int(src[i]) << " e5m2 " << e5m2 << ": " << got << " vs " << want;
    }
  }
}

TEST(CpuMlaIsa, UnknownIsaIsAnErrorAndRequestsAreCappedByThePlatform) {
  {
    ForceCpuIsa env("sse9");
    try {
      (void)mla::chosen_isa(detect_cpu());
      FAIL() << "an unknown ATTN_CPU_ISA must be rejected";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ATTN_CPU_ISA=sse9"), std::string::npos) << e.what();
    }
  }
  {
    // Planning platforms cap a forced build at what they run (this CPU refuses one it cannot run).
    ForceCpuIsa env("amx");
    EXPECT_EQ(mla::variant_for(parse_platform("cpu:avx512")), "avx512");
    EXPECT_EQ(mla::variant_for(parse_platform("cpu:avx512_bf16")), "avx512_bf16");
    EXPECT_EQ(mla::variant_for(parse_platform("cpu:generic")), "generic");
  }
  // Block-sparse rows carry separate K and V: never the AMX kernel.
  ForceCpuIsa env(cpu::best_isa(detect_cpu()));
  EXPECT_NE(mla::variant_for(detect_cpu(), /*latent=*/false), "amx");
  // cpu_mla's own name for the bf16-dot build is accepted as a value too.
  ForceCpuIsa named("avx512_bf16");
  EXPECT_EQ(mla::variant_for(parse_platform("cpu:avx512_bf16")), "avx512_bf16");
}

}  // namespace
}  // namespace attn::test
