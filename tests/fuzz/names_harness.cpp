// Harness: the vocabulary parsers (dtype, kv-cache dtype, attention type, mamba type) and
// platform strings such as "cuda:9.0". A name that parses must print back to a name that
// parses to the same value.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attn/error.hpp"
#include "attn/layer_config.hpp"
#include "attn/platform.hpp"
#include "attn/types.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {
namespace {

void expect(bool ok, const char* what, const std::string& input) {
  if (ok) return;
  std::fprintf(stderr, "names harness: %s failed for input '%s'\n", what, input.c_str());
  std::abort();
}

template <typename Parse>
void round_trip(const std::string& s, Parse parse, const char* what) {
  try {
    const auto v = parse(s);
    expect(parse(std::string(to_string(v))) == v, what, s);
  } catch (const Error&) {
  }
}

}  // namespace

int names(const uint8_t* data, std::size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  round_trip(s, [](const std::string& x) { return parse_dtype(x); }, "parse_dtype(to_string(parse_dtype(s)))");
  round_trip(s, [](const std::string& x) { return parse_kv_cache_dtype(x); }, "kv-cache dtype round trip");
  round_trip(s, [](const std::string& x) { return parse_attn_type(x); }, "attention type round trip");
  round_trip(s, [](const std::string& x) { return parse_mamba_type(x); }, "mamba type round trip");
  try {
    const Platform p = parse_platform(s);
    (void)p.fingerprint();
    (void)p.to_string();
    (void)p.kind_name();
    if (p.kind == PlatformKind::cuda && !p.detected) {
      const Platform again = parse_platform("cuda:" + p.cc.to_string());
      expect(again.cc.major == p.cc.major && again.cc.minor == p.cc.minor, "cuda:<cc> round trip", s);
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace attn::fuzz
