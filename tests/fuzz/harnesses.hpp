#pragma once
// The fuzz harnesses. Each takes one input and must return normally for every byte string:
// attn::Error is an accepted outcome (the input was rejected with a reason); any other
// exception, a crash or a sanitizer report is a bug. fuzz_main.cpp wraps one of them as
// LLVMFuzzerTestOneInput; replay_test.cpp runs all of them over the saved inputs in GoogleTest.
#include <cstddef>
#include <cstdint>

namespace attn::fuzz {

/// Bytes as a config.json → ModelSpec → every layer's config validated.
int model_config(const uint8_t* data, std::size_t size);
/// Bytes → a few small ints → BatchMetadata (build, or hand-made then validate) → write_kv and
/// forward on cpu_flash or reference with tiny heads.
int metadata_forward(const uint8_t* data, std::size_t size);
/// Bytes → dtype, kv-cache dtype, attention type, mamba type and platform names.
int names(const uint8_t* data, std::size_t size);
/// Bytes → KVCacheSpec / KVCache / Buffer with fuzzed dims, LayerConfig::validate.
int constructors(const uint8_t* data, std::size_t size);
/// Bytes → a small random layer and step → cpu_flash and the reference backend on caches of
/// random bytes, with planted NaN in q, K or V: outputs agree (NaN rows, tolerance).
int differential(const uint8_t* data, std::size_t size);
/// Bytes → backend descriptors (any names, enums, size rules, callbacks that throw or return
/// null) added to a fresh registry → one selection, its JSON, create() of the chosen backend.
int plugin_descriptor(const uint8_t* data, std::size_t size);
/// Bytes as a tuning file → TuningFile → written back and read again.
int tuning_file(const uint8_t* data, std::size_t size);

struct Harness {
  const char* name;  // also the folder of its seeds (corpus/<name>) and crash inputs (regressions/<name>)
  int (*run)(const uint8_t*, std::size_t);
};
inline constexpr Harness kHarnesses[] = {
    {"model_config", model_config},
    {"metadata_forward", metadata_forward},
    {"names", names},
    {"constructors", constructors},
    {"differential", differential},
    {"plugin_descriptor", plugin_descriptor},
    {"tuning_file", tuning_file},
};

/// Largest buffer a harness asks for: sizes beyond it are legal but would only test the
/// machine's memory (libFuzzer treats a multi-GiB malloc as a crash).
inline constexpr int64_t kMaxHarnessBytes = int64_t(64) << 20;

}  // namespace attn::fuzz
