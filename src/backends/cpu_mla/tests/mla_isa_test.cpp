// cpu_mla / cpu_sparse under every attend kernel this CPU runs
// (ATTN_CPU_ISA=amx|avx512_bf16|avx512|generic):
// the same fp64 oracles, the variant naming the kernel that ran, and the AMX kernel's edges
// (partial 16-row groups, causal limits inside a 32-key chunk, hi/lo-split f32 q, fp8 caches).
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "kernels/latent/mla_kernel.hpp"
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
          // AMX and bf16-dot serve bf16 / fp8 caches; a float32 or float16 cache, and fp8_ds_mla
          // entries (per-tile scales), run the avx512 kernel.
          const bool dot_kernel = isa == mla::Isa::amx || isa == mla::Isa::avx512_bf16;
          const bool avx512_only = !mla::amx_handles_storage(storage) || kv == KVCacheDType::fp8_ds_mla;
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
    EXPECT_EQ(mla::variant_for(parse_platform("cpu:avx512_bf16")), "avx512bf16");
    EXPECT_EQ(mla::variant_for(parse_platform("cpu:generic")), "portable");
  }
  // Block-sparse rows carry separate K and V: never the AMX kernel.
  ForceCpuIsa env(cpu::best_isa(detect_cpu()));
  EXPECT_NE(mla::variant_for(detect_cpu(), /*latent=*/false), "amx");
  // cpu_mla's own name for the bf16-dot build is accepted as a value too.
  ForceCpuIsa named("avx512bf16");
  EXPECT_EQ(mla::variant_for(parse_platform("cpu:avx512_bf16")), "avx512bf16");
}

}  // namespace
}  // namespace attn::test
