// `attn backends`: the capability table of every registered backend and whether it loads here.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "attn/registry.hpp"
#include "commands.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

template <typename T>
std::vector<std::string> names(const std::vector<T>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.emplace_back(attn::to_string(v));
  return out;
}

std::vector<std::string> platform_names(const std::vector<attn::PlatformKind>& kinds) {
  std::vector<std::string> out;
  for (auto k : kinds) out.push_back(k == attn::PlatformKind::cpu ? "cpu" : "cuda");
  return out;
}

/// The feature flags a backend declares, by LayerConfig field name.
std::vector<std::string> features(const attn::Capabilities& c) {
  std::vector<std::pair<bool, const char*>> flags = {
      {c.mla, "mla"}, {c.sparse, "sparse"}, {c.block_sparse, "block_sparse"}, {c.attention_free, "attention_free"},
      {c.sinks, "sinks"}, {c.sliding_window, "sliding_window"}, {c.soft_cap, "soft_cap"}, {c.alibi, "alibi"},
      {c.non_causal, "non_causal"}, {c.batch_invariance, "batch_invariance"}, {c.kv_connector, "kv_connector"},
      {c.per_head_quant_scales, "per_head_quant_scales"}, {c.mm_prefix, "mm_prefix"},
      {c.distinct_head_size_v, "distinct_head_size_v"}};
  std::vector<std::string> out;
  for (auto [on, name] : flags) if (on) out.emplace_back(name);
  return out;
}

}  // namespace

int cmd_backends(const BackendsOptions& options) {
  const attn::Platform platform = options.platform.empty() ? attn::detect_cpu() : attn::parse_platform(options.platform);
  auto& registry = attn::Registry::instance();
  json out{{"platform", platform.to_string()}, {"backends", json::array()}};
  for (const auto& d : registry.backends()) {
    const attn::Capabilities& c = d->caps;
    std::string why;
    bool on_platform = false;
    for (auto k : c.platforms) on_platform = on_platform || k == platform.kind;
    for (auto f : c.required_cpu_features) {
      if (platform.kind == attn::PlatformKind::cpu && !platform.has(f)) why = "cpu lacks " + std::string(attn::to_string(f));
    }
    if (!on_platform) why = "runs on " + attn::join(platform_names(c.platforms)) + ", not " + platform.kind_name();
    bool loadable = why.empty() && registry.ensure_module(*d, why);
    json caps{{"platforms", platform_names(c.platforms)},
              {"dtypes", names(c.dtypes)},
              {"kv_cache_dtypes", names(c.kv_cache_dtypes)},
              {"head_sizes", c.head_sizes.describe()},
              {"block_sizes", c.block_sizes.describe()},
              {"attn_types", names(c.attn_types)},
              {"features", features(c)},
              {"required_cpu_features", names(c.required_cpu_features)}};
    if (c.min_cc) caps["min_compute_capability"] = c.min_cc->to_string();
    if (c.max_cc) caps["max_compute_capability"] = c.max_cc->to_string();
    json b{{"name", d->name}, {"summary", d->summary}, {"priority", d->priority},
           {"preferred_block_size", d->preferred_block_size}, {"kv_layout", std::string(attn::to_string(d->kv_layout))},
           {"module", d->module}, {"variant", d->variant ? d->variant(platform) : std::string()},
           {"loadable", loadable}, {"capabilities", caps}};
    if (!loadable) b["why_not_loadable"] = why;
    out["backends"].push_back(b);
  }
  for (const auto& e : registry.plugin_errors()) out["plugin_errors"].push_back(e);

  if (options.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "platform " << out["platform"].get<std::string>() << "\n";
  for (const auto& b : out["backends"]) {
    const auto& c = b["capabilities"];
    auto list = [](const json& a) {
      std::string s;
      for (const auto& x : a) s += (s.empty() ? "" : ", ") + x.get<std::string>();
      return s.empty() ? std::string("-") : s;
    };
    std::printf("\n%s (priority %d): %s\n", b["name"].get<std::string>().c_str(), b["priority"].get<int>(),
                b["summary"].get<std::string>().c_str());
    std::printf("  loadable here: %s", b["loadable"].get<bool>() ? "yes" : "no");
    if (!b["loadable"].get<bool>()) std::printf(" (%s)", b["why_not_loadable"].get<std::string>().c_str());
    if (!b["variant"].get<std::string>().empty()) std::printf(", variant %s", b["variant"].get<std::string>().c_str());
    if (!b["module"].get<std::string>().empty()) std::printf(", module %s", b["module"].get<std::string>().c_str());
    std::printf("\n  platforms %s; dtypes %s; kv cache %s\n", list(c["platforms"]).c_str(), list(c["dtypes"]).c_str(),
                list(c["kv_cache_dtypes"]).c_str());
    std::printf("  head sizes %s; block sizes %s (preferred %d, layout %s)\n", c["head_sizes"].get<std::string>().c_str(),
                c["block_sizes"].get<std::string>().c_str(), b["preferred_block_size"].get<int>(),
                b["kv_layout"].get<std::string>().c_str());
    std::printf("  attention types %s; features %s\n", list(c["attn_types"]).c_str(), list(c["features"]).c_str());
    if (!c["required_cpu_features"].empty()) std::printf("  requires cpu %s\n", list(c["required_cpu_features"]).c_str());
  }
  for (const auto& e : registry.plugin_errors()) std::printf("\nplugin error: %s\n", e.c_str());
  return 0;
}

}  // namespace attn_cli
