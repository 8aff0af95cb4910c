// Harness: what an out-of-tree plugin may hand to the registry. Bytes → a few backend descriptors
// (any name, enum values inside and outside their types, any size rules, flags, callbacks that
// return, return null or throw) and factories provided for existing backends, in a fresh
// registry; then one selection on a fuzzed layer, its JSON, and create() of the chosen backend.
// Every refusal must be an attn::Error; the harness's own fixed layers stay cheap to create.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {
namespace {

// An enum value, sometimes past the last one (the byte is the value, as a cast would make it).
template <typename E>
E any_enum(FuzzInput& in, int count) {
  return static_cast<E>(in.small(0, count + 1));
}

template <typename E>
std::vector<E> enum_list(FuzzInput& in, int count) {
  std::vector<E> out(std::size_t(in.small(0, 3)));
  for (E& e : out) e = any_enum<E>(in, count);
  return out;
}

// Small sizes mostly (they meet the layer's), extreme ones sometimes.
int any_size(FuzzInput& in) {
  switch (in.pick(4)) {
    case 0: return in.i32();
    case 1: return in.small(-4, 4);
    default: return in.small(1, 160);
  }
}

SizeRule any_rule(FuzzInput& in) {
  SizeRule r;
  r.kind = static_cast<SizeRule::Kind>(in.small(0, 4));
  r.values.resize(std::size_t(in.small(0, 3)));
  for (int& v : r.values) v = any_size(in);
  r.lo = any_size(in);
  r.hi = any_size(in);
  r.step = any_size(in);
  r.extra.resize(std::size_t(in.small(0, 2)));
  for (int& v : r.extra) v = any_size(in);
  return r;
}

std::string any_name(FuzzInput& in, int index) {
  switch (in.pick(6)) {
    case 0: return in.string(12);
    case 1: return "reference";
    case 2: return "REFERENCE";
    case 3: return "auto";
    default: return "fuzz_plugin_" + std::to_string(index);
  }
}

// Text a plugin writes: sometimes plain, sometimes any bytes.
std::string any_text(FuzzInput& in) { return in.flag() ? in.string(8) : "fuzz"; }

// Throws what a misbehaving plugin might: a standard exception, an attn::Error, or a non-exception.
[[noreturn]] void throw_any(int how, const std::string& what) {
  if (how == 0) throw std::runtime_error(what);
  if (how == 1) throw Error(what);
  throw how;
}

std::function<std::vector<Reason>(const LayerConfig&, const Platform&)> any_checks(FuzzInput& in) {
  const int mode = in.pick(5);
  if (mode == 0) return nullptr;
  const std::string text = any_text(in);
  return [mode, text](const LayerConfig&, const Platform&) -> std::vector<Reason> {
    if (mode == 1) return {};
    if (mode == 2) return {Reason{text, text, text}};
    throw_any(mode - 3, text);
  };
}

std::function<std::string(const Platform&, const LayerConfig&)> any_variant(FuzzInput& in) {
  const int mode = in.pick(4);
  if (mode == 0) return nullptr;
  const std::string text = any_text(in);
  return [mode, text](const Platform&, const LayerConfig&) -> std::string {
    if (mode == 1) return text;
    throw_any(mode - 2, text);
  };
}

std::function<std::vector<std::string>(const Platform&)> any_variants(FuzzInput& in) {
  const int mode = in.pick(4);
  if (mode == 0) return nullptr;
  const std::string text = any_text(in);
  return [mode, text](const Platform&) -> std::vector<std::string> {
    if (mode == 1) return {"", text};
    throw_any(mode - 2, text);
  };
}

using Factory = std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)>;

// The built-in reference factory, from a registry of the harness's own: a fuzzed descriptor that
// replaces "reference" must not make delegation call itself.
std::unique_ptr<AttentionImpl> reference_impl(const LayerParams& p) {
  static const std::shared_ptr<const BackendDescriptor> ref = Registry::with_builtins()->find("reference");
  return ref->create(p);
}

Factory any_factory(FuzzInput& in) {
  const int mode = in.pick(6);
  if (mode == 0) return nullptr;
  const std::string text = any_text(in);
  return [mode, text](const LayerParams& p) -> std::unique_ptr<AttentionImpl> {
    if (mode == 1) return reference_impl(p);
    if (mode == 2) return nullptr;
    throw_any(mode - 3, text);
  };
}

BackendDescriptor any_descriptor(FuzzInput& in, int index) {
  BackendDescriptor d;
  d.name = any_name(in, index);
  d.summary = any_text(in);
  Capabilities& c = d.caps;
  c.platforms = enum_list<PlatformKind>(in, 2);
  if (in.flag()) c.platforms = {PlatformKind::cpu};
  c.required_cpu_features = enum_list<CpuFeature>(in, int(all_cpu_features().size()));
  if (in.flag()) c.min_cc = ComputeCapability{in.small(-1, 100), in.small(-1, 10)};
  if (in.flag()) c.max_cc = ComputeCapability{in.small(-1, 100), in.small(-1, 10)};
  if (in.flag()) c.dtypes = enum_list<DType>(in, int(all_dtypes().size()));
  if (in.flag()) c.kv_cache_dtypes = enum_list<KVCacheDType>(in, int(all_kv_cache_dtypes().size()));
  if (in.flag()) c.attn_types = enum_list<AttnType>(in, int(all_attn_types().size()));
  if (in.flag()) c.head_sizes = any_rule(in);
  if (in.flag()) c.block_sizes = any_rule(in);
  const uint8_t f1 = in.byte(), f2 = in.byte();
  c.distinct_head_size_v = f1 & 1, c.mla = f1 & 2, c.sparse = f1 & 4, c.block_sparse = f1 & 8;
  c.attention_free = f1 & 16, c.sinks = f1 & 32, c.sliding_window = f1 & 64, c.soft_cap = f1 & 128;
  c.alibi = f2 & 1, c.non_causal = f2 & 2, c.batch_invariance = f2 & 4, c.kv_connector = f2 & 8;
  c.per_head_quant_scales = f2 & 16, c.mm_prefix = f2 & 32, d.oracle = f2 & 64;
  d.priority = in.flag() ? in.i32() : in.small(-2, 1100);
  if (in.flag()) d.preferred_block_size = any_size(in);
  d.kv_layout = any_enum<KVLayout>(in, 4);
  if (in.flag())
    d.kv_layout_rule = KVLayoutRule{enum_list<DType>(in, 8), enum_list<DType>(in, 8), any_enum<KVLayout>(in, 4),
                                    enum_list<CpuFeature>(in, int(all_cpu_features().size()))};
  d.device = any_enum<DeviceKind>(in, 2);
  if (in.pick(4) == 0) d.module = in.flag() ? "attn_fuzz_missing" : in.string(8);
  d.extra_checks = any_checks(in);
  d.variant = any_variant(in);
  d.variants = any_variants(in);
  d.create = any_factory(in);
  return d;
}

LayerConfig any_layer(FuzzInput& in) {
  LayerConfig c;
  c.num_kv_heads = in.small(1, 4);
  c.num_heads = c.num_kv_heads * in.small(1, 2);
  c.head_size = in.flag() ? in.small(1, 160) : 64;
  const DType dtypes[] = {DType::float32, DType::float16, DType::bfloat16};
  c.dtype = dtypes[in.pick(3)];
  const auto& kv = all_kv_cache_dtypes();
  if (in.pick(4) == 0) c.kv_cache_dtype = kv[std::size_t(in.pick(int(kv.size())))];
  if (in.flag()) c.block_size = any_size(in);
  const auto& types = all_attn_types();
  c.attn_type = types[std::size_t(in.pick(int(types.size())))];
  const uint8_t f = in.byte();
  c.has_sink = f & 1, c.use_alibi = f & 2, c.use_non_causal = f & 4, c.use_batch_invariant = f & 8;
  c.use_kv_connector = f & 16, c.is_attention_free = f & 32;
  if (f & 64) c.sliding_window = in.small(1, 64);
  return c;
}

}  // namespace

int plugin_descriptor(const uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  std::unique_ptr<Registry> reg = in.flag() ? Registry::with_builtins() : std::make_unique<Registry>();
  const int n = in.small(1, 3);
  for (int i = 0; i < n; ++i) {
    try {
      reg->add(any_descriptor(in, i));
    } catch (const Error&) {
    }
    if (in.pick(4) == 0) {
      try {
        reg->provide(any_name(in, in.small(0, n)), any_factory(in));
      } catch (const Error&) {
      }
    }
  }
  const Platform platform = in.pick(4) == 0 ? parse_platform("cuda:9.0") : detect_cpu();
  for (const auto& d : reg->backends()) {
    try {
      (void)to_json(*d, platform);  // what attn backends prints
    } catch (const Error&) {
    }
  }
  SelectOptions options;
  options.use_env = false;
  options.registry = reg.get();
  options.platform = platform;
  if (in.pick(4) == 0) options.backend = any_name(in, in.small(0, n));
  const LayerConfig config = any_layer(in);
  try {
    const Decision decision = in.flag() ? explain(config, options) : select(config, options);
    (void)decision.to_json();
    if (decision.backend.empty() || !platform.detected) throw Error("nothing to create");
    LayerParams params;
    params.config = config;
    if (in.flag()) params.variant = decision.variant;
    std::unique_ptr<AttentionImpl> impl = reg->create(decision.backend, params);
    if (!impl) {
      std::fprintf(stderr, "plugin_descriptor harness: create(%s) returned null\n", decision.backend.c_str());
      std::abort();
    }
    (void)impl->variant();
  } catch (const Error&) {
  }
  clear_selector_cache();  // this input's registry is gone: its decisions would only pile up
  return 0;
}

}  // namespace attn::fuzz
