// The tuning file, a selector input: JSON I/O, where it lives, and the one copy the selector
// reads (`tune` in src/tune/ writes it through save_tuning).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include <nlohmann/json.hpp>

#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/selector.hpp"
#include "attn/tune.hpp"
#include "core/json_file.hpp"
#include "core/log.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kFormat = 1;  // bump when the layout below changes incompatibly

json choice_json(const TunedChoice& c) {
  json j{{"backend", c.backend}, {"variant", c.variant}, {"block_size", c.block_size},
         {"decode_us", c.decode_us}, {"prefill_us", c.prefill_us}};
  if (!c.error.empty()) j["error"] = c.error;
  return j;
}

/// Bounds on a tuning file: one entry per tuned layer config with a few choices each is a few
/// KiB; the nesting is 4 levels (configs, an entry, its config object, a value).
constexpr json_file::Limits kTuningLimits{std::size_t(16) << 20, 16};
/// Largest time one recorded run may report (µs): about a day, far past any kernel call.
constexpr double kMaxMicros = 1e11;
/// Entries a file may hold: far past a tuning run's layer configs and their candidates.
constexpr std::size_t kMaxConfigs = 1 << 16, kMaxChoices = 1 << 12;

TunedChoice choice_from(const json_file::Field& j) {
  TunedChoice c;
  c.backend = j["backend"].string();
  c.variant = j["variant"].string();
  c.block_size = int(j["block_size"].integer(0, limits::kMaxBlockSize));
  c.decode_us = j["decode_us"].number(0, kMaxMicros);
  c.prefill_us = j["prefill_us"].number(0, kMaxMicros);
  if (auto e = j.find("error")) c.error = e->string();
  return c;
}

std::string string_or(const json_file::Field& j, const std::string& key) {
  const auto f = j.find(key);
  return f ? f->string() : "";
}

/// Every field of the file typed and range-checked; errors name `what` and the field.
TuningFile parse_tuning(const std::string& text, const std::string& what) {
  const json doc = json_file::parse(text, what, kTuningLimits);
  const json_file::Field j(doc, what);
  j.object();
  const json_file::Field format = j["format"];
  if (format.integer(0, std::numeric_limits<int32_t>::max()) != kFormat)
    format.fail(std::to_string(kFormat) + " (the format this attn reads)");
  TuningFile f;
  f.attn_version = j["attn_version"].string();
  f.fingerprint = j["fingerprint"].string();
  f.platform = string_or(j, "platform");
  f.tuned_at = j["tuned_at"].string();
  if (auto t = j.find("threads")) f.threads = int(t->integer(0, limits::kMaxThreads));
  f.decode_shape = string_or(j, "decode_shape");
  f.prefill_shape = string_or(j, "prefill_shape");
  const json_file::Field configs = j["configs"];
  const std::size_t n = configs.array(kMaxConfigs).size();
  for (std::size_t i = 0; i < n; ++i) {
    const json_file::Field cj = configs[i];
    TunedConfig c;
    c.key = cj["key"].string();
    const auto config = cj.find("config");
    c.config_json = config ? config->object().dump() : "{}";
    const json_file::Field choices = cj["choices"];
    const std::size_t m = choices.array(kMaxChoices).size();
    for (std::size_t k = 0; k < m; ++k) c.choices.push_back(choice_from(choices[k]));
    f.configs.push_back(std::move(c));
  }
  return f;
}

struct Active {
  std::mutex mu;
  bool loaded = false;
  std::shared_ptr<const TuningFile> file;
  std::string warning;
};
Active& active() {
  static Active a;
  return a;
}

/// The file at `path` if it applies to this machine and version; else null, with `warning` set
/// (and logged) unless there is no file.
std::shared_ptr<const TuningFile> read_applicable(const std::string& path, std::string& warning) {
  if (path.empty()) return nullptr;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    log_debug("no tuning file at " + path + ": selection by priority");
    return nullptr;
  }
  const auto ignore = [&](const std::string& why) -> std::shared_ptr<const TuningFile> {
    warning = "ignoring tuning file " + path + ": " + why + "; selection by priority until `attn tune` measures this machine again";
    log_warning(warning);
    return nullptr;
  };
  try {
    auto f = std::make_shared<TuningFile>(TuningFile::load(path));
    if (f->attn_version != version())
      return ignore("stale, written by attn " + f->attn_version + " (this is attn " + version() + ")");
    if (f->fingerprint != tuning_fingerprint())
      return ignore("tuned on another machine (" + f->fingerprint + "; this is " + tuning_fingerprint() + ")");
    return f;
  } catch (const Error& e) {
    return ignore(std::string("corrupt (") + e.what() + ")");
  }
}

}  // namespace

std::string version() { return ATTN_VERSION; }

std::string tuning_fingerprint(const Platform& p) {
  return p.name + "|" + std::to_string(p.cores) + " cores|" + p.fingerprint();
}

std::string tuning_file_path() {
  if (const char* env = std::getenv("ATTN_TUNE_FILE"); env && *env) return std::string(env) == "off" ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "attn" / "tuning.json").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "attn" / "tuning.json").string();
  return (fs::temp_directory_path() / "attn-tuning.json").string();
}

std::string tuning_key(const LayerConfig& config) {
  LayerConfig c = config;
  c.block_size = 0;
  return c.to_string();
}

const TunedConfig* TuningFile::find(const LayerConfig& config) const {
  const std::string key = tuning_key(config);
  for (const auto& c : configs)
    if (c.key == key) return &c;
  return nullptr;
}

void TuningFile::merge(const TuningFile& newer) {
  for (const auto& c : newer.configs) {
    bool replaced = false;
    for (auto& mine : configs)
      if (mine.key == c.key) mine = c, replaced = true;
    if (!replaced) configs.push_back(c);
  }
  attn_version = newer.attn_version, fingerprint = newer.fingerprint, platform = newer.platform;
  tuned_at = newer.tuned_at, threads = newer.threads;
  decode_shape = newer.decode_shape, prefill_shape = newer.prefill_shape;
}

std::string TuningFile::to_json() const {
  json j{{"format", kFormat},          {"attn_version", attn_version},   {"fingerprint", fingerprint},
         {"platform", platform},       {"tuned_at", tuned_at},           {"threads", threads},
         {"decode_shape", decode_shape}, {"prefill_shape", prefill_shape}, {"configs", json::array()}};
  for (const auto& c : configs) {
    json cj{{"key", c.key}, {"config", json::parse(c.config_json)}, {"choices", json::array()}};
    for (const auto& ch : c.choices) cj["choices"].push_back(choice_json(ch));
    j["configs"].push_back(cj);
  }
  return j.dump(2);
}

TuningFile TuningFile::parse(const std::string& text) { return parse_tuning(text, "tuning file"); }

TuningFile TuningFile::load(const std::string& path) {
  const std::string what = "tuning file '" + path + "'";
  return parse_tuning(json_file::read(path, what, kTuningLimits.max_bytes), what);
}

void TuningFile::save(const std::string& path) const {
  require(!path.empty(), "tuning file path", "''", "a file path (ATTN_TUNE_FILE=off disables tuning)");
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << to_json() << "\n";
    if (!out) throw Error("tuning file '" + tmp.string() + "' cannot be written");
  }
  fs::rename(tmp, p, ec);
  if (ec) throw Error("tuning file '" + path + "' cannot be written: " + ec.message());
}

std::shared_ptr<const TuningFile> active_tuning() {
  Active& a = active();
  std::lock_guard lock(a.mu);
  if (!a.loaded) a.warning.clear(), a.file = read_applicable(tuning_file_path(), a.warning), a.loaded = true;
  return a.file;
}

std::string tuning_warning() {
  active_tuning();
  Active& a = active();
  std::lock_guard lock(a.mu);
  return a.warning;
}

void reload_tuning() {
  {
    Active& a = active();
    std::lock_guard lock(a.mu);
    a.loaded = false;
    a.file.reset();
    a.warning.clear();
  }
  clear_selector_cache();
}

std::string save_tuning(const TuningFile& fresh, std::string path) {
  const std::string active = tuning_file_path();
  if (path.empty()) path = active;
  require(!path.empty(), "ATTN_TUNE_FILE", "off", "a path to write the tuning file to (or an explicit output path)");
  TuningFile out = fresh;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    try {
      TuningFile old = TuningFile::load(path);
      if (old.attn_version == fresh.attn_version && old.fingerprint == fresh.fingerprint) old.merge(fresh), out = std::move(old);
    } catch (const Error&) {
      // corrupt: replaced
    }
  }
  out.save(path);
  if (path == active) reload_tuning();
  return path;
}

}  // namespace attn
