// Vocabulary parse/print (types.hpp, MambaType, KVLayout, MlaForm, DeviceKind, LayerKind): every name round-trips, aliases resolve, and
// unknown names produce an attn::Error that lists every valid value.
#include <gtest/gtest.h>

#include "attn/kv_cache.hpp"
#include "attn/layer_config.hpp"
#include "attn/model.hpp"
#include "attn/step.hpp"
#include "attn/tensor.hpp"
#include "attn/types.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

TEST(Types, EveryDTypeRoundTripsThroughItsName) {
  for (DType d : all_dtypes()) EXPECT_EQ(parse_dtype(to_string(d)), d) << to_string(d);
  EXPECT_EQ(all_dtypes().size(), 8u);
}

TEST(Types, DTypeAliases) {
  EXPECT_EQ(parse_dtype("fp32"), DType::float32);
  EXPECT_EQ(parse_dtype("float"), DType::float32);
  EXPECT_EQ(parse_dtype("half"), DType::float16);
  EXPECT_EQ(parse_dtype("fp16"), DType::float16);
  EXPECT_EQ(parse_dtype("bf16"), DType::bfloat16);
  EXPECT_EQ(parse_dtype("torch.bfloat16"), DType::bfloat16);
}

TEST(Types, UnknownDTypeListsValidValues) {
  EXPECT_TRUE(throws_error([] { parse_dtype("float64"); },
                           {"Invalid dtype: 'float64'", "float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "int8"}));
  EXPECT_TRUE(throws_error([] { parse_dtype(""); }, {"Invalid dtype: ''"}));
}

TEST(Types, DTypeSizes) {
  EXPECT_EQ(dtype_size(DType::float32), 4u);
  EXPECT_EQ(dtype_size(DType::float16), 2u);
  EXPECT_EQ(dtype_size(DType::bfloat16), 2u);
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::fp8_e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::int8), 1u);
  EXPECT_EQ(dtype_size(DType::int32), 4u);
  EXPECT_EQ(dtype_size(DType::int64), 8u);
}

TEST(Types, EveryVllmKvCacheDTypeNameParses) {
  // The names vLLM's CacheDType accepts (see shared/reference/vllm-selector.md).
  for (const char* name : {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                           "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                           "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6"})
    EXPECT_EQ(to_string(parse_kv_cache_dtype(name)), name);
  for (KVCacheDType k : all_kv_cache_dtypes()) EXPECT_EQ(parse_kv_cache_dtype(to_string(k)), k);
}

TEST(Types, InvalidKvCacheDTypeListsEveryValidValue) {
  std::string expected = "Valid values are: ";
  for (std::size_t i = 0; i < all_kv_cache_dtypes().size(); ++i)
    expected += (i ? ", " : "") + std::string(to_string(all_kv_cache_dtypes()[i]));
  EXPECT_TRUE(throws_error([] { parse_kv_cache_dtype("fp9"); }, {"Invalid kv_cache_dtype: 'fp9'", expected}));
  EXPECT_TRUE(throws_error([] { parse_kv_cache_dtype("AUTO"); }, {"'AUTO'"})) << "names are case-sensitive, as in vLLM";
}

TEST(Types, QuantizedKvCacheDTypes) {
  EXPECT_FALSE(is_quantized(KVCacheDType::auto_));
  EXPECT_FALSE(is_quantized(KVCacheDType::float16));
  EXPECT_FALSE(is_quantized(KVCacheDType::bfloat16));
  for (KVCacheDType k : all_kv_cache_dtypes())
    if (k != KVCacheDType::auto_ && k != KVCacheDType::float16 && k != KVCacheDType::bfloat16) {
      EXPECT_TRUE(is_quantized(k)) << to_string(k);
    }
}

TEST(Types, KvStorageDType) {
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::auto_, DType::float32), DType::float32);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::auto_, DType::bfloat16), DType::bfloat16);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::float16, DType::bfloat16), DType::float16);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::bfloat16, DType::float32), DType::bfloat16);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8, DType::bfloat16), DType::fp8_e4m3);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8_e4m3, DType::float16), DType::fp8_e4m3);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8_e5m2, DType::float16), DType::fp8_e5m2);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::int8_per_token_head, DType::bfloat16), DType::int8);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8_inc, DType::bfloat16), DType::fp8_e4m3);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8_per_token_head, DType::float32), DType::fp8_e4m3);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::int4_per_token_head, DType::bfloat16), DType::int8);  // bytes of two codes
  for (KVCacheDType k : all_kv_cache_dtypes())
    EXPECT_EQ(has_token_head_scales(k), k == KVCacheDType::int8_per_token_head || k == KVCacheDType::fp8_per_token_head ||
                                            k == KVCacheDType::int4_per_token_head);
  // fp8_ds_mla is now implemented (cpu_mla / cpu_sparse): its entries are bytes (e4m3 latent,
  // fp32 tile scales and bf16 rope inline), stored as fp8_e4m3 elements; it used to throw.
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::fp8_ds_mla, DType::bfloat16), DType::fp8_e4m3);
}

TEST(Types, KvStorageDTypeOfPackedFormatsIsBytes) {
  // nvfp4 and turboquant: bytes (of e2m1 codes and e4m3 block scales; of K and V slots). Every
  // name has a storage dtype now; these used to throw.
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::turboquant_4bit_nc, DType::bfloat16), DType::int8);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::nvfp4, DType::bfloat16), DType::int8);
  EXPECT_EQ(kv_storage_dtype(KVCacheDType::nvfp4_4over6, DType::float32), DType::int8);
}

TEST(Types, AttnTypesRoundTripAndErrorsListValues) {
  for (AttnType t : all_attn_types()) EXPECT_EQ(parse_attn_type(to_string(t)), t);
  EXPECT_EQ(all_attn_types().size(), 4u);
  EXPECT_TRUE(throws_error([] { parse_attn_type("cross"); },
                           {"Invalid attn_type: 'cross'", "decoder, encoder, encoder_only, encoder_decoder"}));
}

TEST(Types, MambaTypesRoundTripAndErrorsListValues) {
  for (MambaType t : all_mamba_types()) EXPECT_EQ(parse_mamba_type(to_string(t)), t);
  EXPECT_TRUE(throws_error([] { parse_mamba_type("mamba3"); },
                           {"'mamba3'", "mamba1, mamba2, short_conv, linear_attention, gdn_attention, custom"}));
}

TEST(Types, KvLayoutsAndMlaFormsRoundTripAndErrorsListValues) {
  for (KVLayout l : {KVLayout::NHD, KVLayout::HND, KVLayout::MLA, KVLayout::HND_PAIRS}) EXPECT_EQ(parse_kv_layout(to_string(l)), l);
  for (MlaForm f : {MlaForm::absorbed, MlaForm::expanded}) EXPECT_EQ(parse_mla_form(to_string(f)), f);
  EXPECT_TRUE(throws_error([] { parse_kv_layout("nhd"); }, {"Invalid layout: 'nhd'", "NHD, HND, MLA, HND_PAIRS"}));
  EXPECT_TRUE(throws_error([] { parse_mla_form("folded"); }, {"Invalid mla_form: 'folded'", "absorbed, expanded"}));
}

TEST(Types, EnumNamesAndOutOfRangeValues) {
  EXPECT_EQ(to_string(DeviceKind::cpu), "cpu");
  EXPECT_EQ(to_string(DeviceKind::cuda), "cuda");
  EXPECT_EQ(to_string(LayerKind::attention), "attention");
  EXPECT_EQ(to_string(LayerKind::mixer), "mixer");
  // A value past the last enumerator (a plugin's descriptor can carry one) has no name.
  EXPECT_EQ(to_string(DeviceKind(uint8_t(kLastDeviceKind) + 1)), "?");
  EXPECT_EQ(to_string(KVLayout(uint8_t(kLastKVLayout) + 1)), "?");
  EXPECT_EQ(to_string(LayerKind(uint8_t(kLastLayerKind) + 1)), "?");
  EXPECT_EQ(to_string(MlaForm(uint8_t(kLastMlaForm) + 1)), "?");
}

TEST(Types, JoinSeparatesWithTheGivenSeparator) {
  EXPECT_EQ(join({}), "");
  EXPECT_EQ(join({"a"}), "a");
  EXPECT_EQ(join({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(join({"a", "b"}, "; "), "a; b");
}

}  // namespace
