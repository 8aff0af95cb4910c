#pragma once
/// Measured selection: `tune` times every valid backend × kernel variant × block size of some
/// layer configs on this machine and writes a tuning file; the selector then prefers the measured
/// fastest valid choice for those configs (priority still breaks ties and serves the rest).
///
/// The file is JSON, one per machine: keyed by tuning_fingerprint() (CPU model, features, cores)
/// and attn's version. Location: $ATTN_TUNE_FILE, else $XDG_CACHE_HOME/attn/tuning.json, else
/// ~/.cache/attn/tuning.json; ATTN_TUNE_FILE=off disables tuning. The selector reads it once per
/// process; a stale, foreign or corrupt file is ignored with one warning.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/layer_config.hpp"
#include "attn/platform.hpp"

namespace attn {

/// attn's version ("0.1.0"); a tuning file from another version is stale.
std::string version();
/// What a tuning file must match to apply here: CPU model, ISA features and core count.
std::string tuning_fingerprint(const Platform& platform = detect_cpu());
/// Where the selector reads (and `tune` writes) the tuning file; "" when ATTN_TUNE_FILE=off.
std::string tuning_file_path();

/// One timed choice of one config. Times are the fastest of interleaved runs, in microseconds;
/// 0 = not measured (the time budget ran out, or the run failed: `error`).
struct TunedChoice {
  std::string backend;
  std::string variant;      // "" for a backend with one variant
  int block_size = 0;
  double decode_us = 0, prefill_us = 0;
  std::string error;        // why it could not run (never selected then)
  bool measured() const { return decode_us > 0 && prefill_us > 0 && error.empty(); }
};

/// The timings of one layer config.
struct TunedConfig {
  std::string key;          // tuning_key(config)
  std::string config_json;  // layer_config_json(config), for people reading the file
  std::vector<TunedChoice> choices;
};
/// The config's identity in a tuning file: LayerConfig::to_string() with block_size cleared
/// (the block size is part of what is tuned).
std::string tuning_key(const LayerConfig& config);

struct TuningFile {
  std::string attn_version;  // version() when written
  std::string fingerprint;   // tuning_fingerprint() when written
  std::string platform;      // Platform::to_string(), for people
  std::string tuned_at;      // UTC, "2026-11-30T15:50:00Z"
  int threads = 0;           // threads each run used
  std::string decode_shape, prefill_shape;  // what was timed, for people
  std::vector<TunedConfig> configs;

  /// The entry of `config` (block_size ignored), or null.
  const TunedConfig* find(const LayerConfig& config) const;
  /// Adds or replaces the entries of `other`'s configs (a new tuning run over an older file).
  void merge(const TuningFile& other);

  std::string to_json() const;
  /// Throws attn::Error naming what is malformed.
  static TuningFile parse(const std::string& json_text);
  /// Reads `path`; throws attn::Error when it cannot be read or parsed.
  static TuningFile load(const std::string& path);
  /// Writes atomically (temporary file, then rename), creating the folder.
  void save(const std::string& path) const;
};

/// The tuning the selector uses: tuning_file_path() read once, or null (no file, ATTN_TUNE_FILE=off,
/// or a stale / foreign / corrupt file, which logs one warning saying which and why).
std::shared_ptr<const TuningFile> active_tuning();
/// Why the tuning file read last is not used ("" when it applies or there is none): the text of the
/// warning that was logged.
std::string tuning_warning();
/// Reads the tuning file again (after `tune` wrote it, or ATTN_TUNE_FILE changed) and clears the
/// selector's cache so decisions follow it.
void reload_tuning();

/// Writes `fresh` to `path` ("" = tuning_file_path()), merged over the configs already there when
/// that file is for this machine and version (else replaced), and reloads the selector's tuning
/// when `path` is the one it reads. Returns the path written.
std::string save_tuning(const TuningFile& fresh, std::string path = "");

/// Where `tune` is, for a progress line.
struct TuneProgress {
  int done = 0, total = 0;   // timed runs so far / planned (rounds after the first may be skipped)
  double elapsed_s = 0, budget_s = 0;
  std::string current;       // "cpu_flash[avx512] block 32 decode"
  bool finished = false;     // the last call
};
/// "[ 12/40] 3.1s of 20s  cpu_flash[avx512] block 32 decode".
std::string progress_line(const TuneProgress& p);
/// A TuneOptions::progress that keeps one progress line up to date on stderr.
std::function<void(const TuneProgress&)> progress_to_stderr();

struct TuneOptions {
  double budget_s = 20;      // wall time for all timing; choices left untimed are not measured
  int threads = 0;           // per run; 0 = all cores
  int decode_batch = 4;      // decode shape: sequences of one new token each
  int decode_context = 1024; //   over this many cached tokens
  int prefill_len = 256;     // prefill shape: one sequence of this many new tokens
  int rounds = 25;           // interleaved timing rounds at most (the fastest run of each counts)
  /// Block sizes to try, each intersected with the backend's rule; the backend's preferred size
  /// is always tried. A config's own block_size (set by the user) replaces the list.
  std::vector<int> block_sizes{16, 32, 64, 128};
  std::string backend;       // "" = every valid backend; else only this one
  std::function<void(const TuneProgress&)> progress;
};

/// Times every valid backend × variant × allowed block size of each distinct config (mixer and
/// attention-free layers are skipped) on the decode and prefill shapes. Throws attn::Error for bad
/// options. The result is not saved: see TuningFile::save and reload_tuning.
TuningFile tune(const std::vector<LayerConfig>& configs, const TuneOptions& options = {});

}  // namespace attn
