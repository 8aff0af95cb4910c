// `attn backends`: the capability table of every registered backend and whether it loads here.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "attn/registry.hpp"
#include "commands.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

/// Why `d` cannot run on `platform` before its module is even tried: another platform, or a
/// CPU without the features it requires.
std::string why_not_here(const attn::BackendDescriptor& d, const attn::Platform& platform) {
  const attn::Capabilities& c = d.caps;
  bool on_platform = false;
  for (auto k : c.platforms) on_platform = on_platform || k == platform.kind;
  std::vector<std::string> kinds;
  for (auto k : c.platforms) kinds.emplace_back(attn::to_string(k));
  if (!on_platform) return "runs on " + attn::join(kinds) + ", not " + platform.kind_name();
  std::string why;
  for (auto f : c.required_cpu_features) {
    if (platform.kind == attn::PlatformKind::cpu && !platform.has(f)) why = "cpu lacks " + std::string(attn::to_string(f));
  }
  return why;
}

}  // namespace

int cmd_backends(const BackendsOptions& options) {
  const attn::Platform platform = options.platform.empty() ? attn::detect_cpu() : attn::parse_platform(options.platform);
  auto& registry = attn::Registry::instance();
  json out{{"platform", platform.to_string()}, {"backends", json::array()}};
  for (const auto& d : registry.backends()) {
    std::string why = why_not_here(*d, platform);
    const bool loadable = why.empty() && registry.ensure_module(*d, why);
    json b = json::parse(attn::to_json(*d, platform));
    b["loadable"] = loadable;
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
    const std::string layout = b["kv_layout"].get<std::string>();
    std::printf("  head sizes %s; block sizes %s (preferred %d, layout %s)\n", c["head_sizes"].get<std::string>().c_str(),
                c["block_sizes"].get<std::string>().c_str(), b["preferred_block_size"].get<int>(), layout.c_str());
    if (const json& r = b["kv_layout_rule"]; !r.is_null()) {
      auto dtypes = [&](const json& a) { return a.empty() ? std::string("any") : list(a); };
      std::printf("  layout %s for q %s and cache %s where the sizes fit; %s otherwise\n", layout.c_str(),
                  dtypes(r["q_dtypes"]).c_str(), dtypes(r["storage_dtypes"]).c_str(), r["otherwise"].get<std::string>().c_str());
    }
    std::printf("  attention types %s; features %s\n", list(c["attn_types"]).c_str(), list(c["features"]).c_str());
    if (!c["required_cpu_features"].empty()) std::printf("  requires cpu %s\n", list(c["required_cpu_features"]).c_str());
  }
  for (const auto& e : registry.plugin_errors()) std::printf("\nplugin error: %s\n", e.c_str());
  return 0;
}

}  // namespace attn_cli
