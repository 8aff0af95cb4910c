// cpu_mla / cpu_sparse against the fp64 MLA oracles (tests/support/mla_reference).
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

MlaCaseSpec ragged(const std::string& backend, DType dtype, KVCacheDType kv, uint64_t seed) {
  // decode, chunked prefill, fresh prefill, odd lengths
  return mla_spec(backend, 4, dtype, kv, seed, {{37, 1}, {50, 13}, {0, 29}, {1, 1}});
}

void expect_matches_absorbed(MlaCaseSpec spec) {
  MlaCase c = make_mla_case(spec);
  run_mla_forward(c);
  const DType storage = c.cache->spec().dtype;
  const CompareResult r = compare_values(tensor_values(c.out), mla_absorbed_reference(c), spec.dtype, storage);
  EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message << " (max abs err " << r.max_abs_err << ")";
}

TEST(CpuMla, AbsorbedEqualsExplicitPerHeadAttention) {
  for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
    MlaCaseSpec spec = ragged(backend, DType::float32, KVCacheDType::auto_, fresh_seed());
    MlaCase c = make_mla_case(spec);
    run_mla_forward(c);
    const auto got = project_latent(c, tensor_values(c.out));
    const CompareResult r = compare_values(got, mla_explicit_reference(c), DType::float32, DType::float32);
    EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message << " (max abs err " << r.max_abs_err << ")";
  }
}

TEST(CpuMla, EveryDeclaredCacheDtypeAndIoDtype) {
  const uint64_t seed = fresh_seed();
  for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
    auto desc = Registry::instance().find(backend);
    ASSERT_TRUE(desc);
    for (DType io : desc->caps.dtypes)
      for (KVCacheDType kv : desc->caps.kv_cache_dtypes) expect_matches_absorbed(ragged(backend, io, kv, seed));
  }
}

TEST(CpuMla, OddBlockSizeAndAliasedPrefixBlocks) {
  for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
    MlaCaseSpec spec = ragged(backend, DType::bfloat16, KVCacheDType::auto_, fresh_seed());
    spec.block_size = 7;
    spec.alias_prefix = true;
    spec.seqs = {{45, 1}, {45, 3}, {30, 1}, {61, 6}};
    expect_matches_absorbed(spec);
  }
}

TEST(CpuMla, LongDecodeSplitsKeysAcrossThreads) {
  // One sequence, long context: the driver splits the keys and merges by log-sum-exp.
  for (const char* backend : {"cpu_mla", "cpu_sparse"}) {
    MlaCaseSpec spec = ragged(backend, DType::float32, KVCacheDType::auto_, fresh_seed());
    spec.num_heads = 16;
    spec.seqs = {{2100, 1}};
    spec.num_threads = 2;
    if (spec.topk) spec.topk = 1200;
    expect_matches_absorbed(spec);
  }
}

TEST(CpuMla, DeepSeekHeadCountsAndThreadCounts) {
  for (int heads : {1, 16, 128}) {
    for (int threads : {1, 2}) {
      MlaCaseSpec spec = ragged("cpu_mla", DType::bfloat16, KVCacheDType::fp8_e4m3, fresh_seed());
      spec.num_heads = heads;
      spec.num_threads = threads;
      spec.seqs = {{20, 1}, {9, 4}};
      expect_matches_absorbed(spec);
    }
  }
}

namespace {
/// The case's layer again, created with up-projections (the expanded form needs them).
std::unique_ptr<AttentionImpl> with_up_projections(const MlaCase& c, std::vector<float> w_uk, std::vector<float> w_uv) {
  LayerParams p = c.impl->params();
  p.mla_w_uk = std::move(w_uk), p.mla_w_uv = std::move(w_uv);
  return Registry::instance().create(c.spec.backend, p);
}

// The expanded form on a cache of `kv` against the explicit oracle over the same (dequantized) latent.
void expect_expanded_matches(KVCacheDType kv) {
  MlaCaseSpec spec = ragged("cpu_mla", DType::float32, kv, fresh_seed());
  MlaCase c = make_mla_case(spec);
  const int T = c.md.num_tokens, H = spec.num_heads, N = spec.nope, P = spec.rope, V = spec.v_dim;
  Buffer q(DType::float32, {T, H, N + P}), out(DType::float32, {T, H, V});
  for (int r = 0; r < T * H; ++r) {
    for (int n = 0; n < N; ++n) static_cast<float*>(q.data())[size_t(r) * (N + P) + n] = float(c.q_nope[size_t(r) * N + n]);
    for (int p = 0; p < P; ++p) static_cast<float*>(q.data())[size_t(r) * (N + P) + N + p] = float(c.q_pe[size_t(r) * P + p]);
  }
  ForwardArgs args;
  args.q = q.view(), args.out = out.view(), args.cache = c.cache.get(), args.mla_form = MlaForm::expanded;
  EXPECT_THROW(c.impl->forward(c.md, args), Error);  // created without projections
  const auto impl = with_up_projections(c, std::vector<float>(c.w_uk.begin(), c.w_uk.end()),
                                        std::vector<float>(c.w_uv.begin(), c.w_uv.end()));
  EXPECT_EQ(impl->forward(c.md, args).form, "expanded");
  const CompareResult r = compare_values(tensor_values(out), mla_explicit_reference(c), DType::float32, DType::float32);
  EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message;
  ForwardArgs absorbed;
  absorbed.q = c.q.view(), absorbed.out = c.out.view(), absorbed.cache = c.cache.get();
  EXPECT_EQ(impl->forward(c.md, absorbed).form, "absorbed");
}

}  // namespace

TEST(CpuMla, ExpandedFormEqualsExplicitOracle) {
  for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_ds_mla}) expect_expanded_matches(kv);
}

TEST(CpuMla, ExpandedPaysOffOnlyForLongPrefill) {
  MlaCaseSpec spec = ragged("cpu_mla", DType::bfloat16, KVCacheDType::auto_, 7);
  spec.seqs = {{0, 600}};
  MlaCase c = make_mla_case(spec);
  // The plan prefers a form from FLOPs alone (plans do not depend on weights).
  EXPECT_EQ(c.impl->plan(c.md, c.cache->spec())->preferred_mla_form(), MlaForm::expanded);
  const BatchMetadata decode = BatchMetadata::build({{599, 1, c.md.block_table}}, spec.block_size, c.cache->spec().num_blocks);
  EXPECT_EQ(c.impl->plan(decode, c.cache->spec())->preferred_mla_form(), MlaForm::absorbed);
}

TEST(CpuSparse, TopkIndicesAreCheckedAndPerCall) {
  MlaCaseSpec spec = ragged("cpu_sparse", DType::bfloat16, KVCacheDType::auto_, fresh_seed());
  MlaCase c = make_mla_case(spec);
  run_mla_forward(c);
  // Indices are a per-call input: a call without them is an error, not a reuse of the last ones.
  EXPECT_THROW(c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view()), Error);
  ForwardArgs args;
  args.q = c.q.view(), args.out = c.out.view(), args.cache = c.cache.get();
  std::vector<int32_t> bad = c.topk;
  bad[0] = c.md.seq_lens[0];  // one past the end of sequence 0
  args.topk_indices = TensorView::contiguous(bad.data(), DType::int32, {c.md.num_tokens, spec.topk});
  EXPECT_THROW(c.impl->forward(c.md, args), Error);
  std::vector<int32_t> short_rows(size_t(c.md.num_tokens - 1) * spec.topk, -1);
  args.topk_indices = TensorView::contiguous(short_rows.data(), DType::int32, {c.md.num_tokens - 1, spec.topk});
  EXPECT_THROW(c.impl->forward(c.md, args), Error);
  args.topk_indices = TensorView::contiguous(c.topk.data(), DType::int32, {c.md.num_tokens, spec.topk});
  args.mla_form = MlaForm::expanded;
  EXPECT_THROW(c.impl->forward(c.md, args), Error);
}

TEST(CpuSparse, AllPaddingRowsGiveZeros) {
  MlaCaseSpec spec = ragged("cpu_sparse", DType::float32, KVCacheDType::auto_, fresh_seed());
  MlaCase c = make_mla_case(spec);
  std::fill(c.topk.begin(), c.topk.begin() + spec.topk, -1);  // token 0 attends nothing
  run_mla_forward(c);
  const auto out = tensor_values(c.out);
  for (int i = 0; i < spec.num_heads * spec.rank; ++i) ASSERT_EQ(out[size_t(i)], 0.0) << i;
  const CompareResult r = compare_values(out, mla_absorbed_reference(c), DType::float32, DType::float32);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CpuMla, WrongShapesAreErrorsNotCrashes) {
  MlaCaseSpec spec = ragged("cpu_mla", DType::bfloat16, KVCacheDType::auto_, 3);
  MlaCase c = make_mla_case(spec);
  Buffer q_bad(DType::bfloat16, {c.md.num_tokens, spec.num_heads, 512});
  EXPECT_THROW(c.impl->forward(q_bad.view(), *c.cache, c.md, c.out.view()), Error);
  Buffer out_bad(DType::bfloat16, {c.md.num_tokens, spec.num_heads, 576});
  EXPECT_THROW(c.impl->forward(c.q.view(), *c.cache, c.md, out_bad.view()), Error);
}

}  // namespace
}  // namespace attn::test
