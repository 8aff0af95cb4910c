// Harness: the tuning-file reader. Any byte string is a candidate tuning file; one that parses
// must write back (to_json) and read again to the same entries.
#include <cstdlib>
#include <string>

#include "attn/error.hpp"
#include "attn/tune.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {

int tuning_file(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  TuningFile f;
  try {
    f = TuningFile::parse(text);
  } catch (const Error&) {
    return 0;
  }
  // What the reader accepted, the writer must write and the reader take back unchanged.
  const TuningFile g = TuningFile::parse(f.to_json());
  if (g.to_json() != f.to_json() || g.configs.size() != f.configs.size()) std::abort();
  return 0;
}

}  // namespace attn::fuzz
