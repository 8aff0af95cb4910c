// A backend's callbacks are wrapped once, when the registry takes its descriptor, so every caller
// (the selector, the tuner, JSON, the CLI, Python) gets the same containment without a try block
// of its own: only attn::Error leaves a callback, a factory never hands back null, and the text a
// callback returns is plain UTF-8 (it reaches JSON output).
#include "plugin/contain_callbacks.hpp"

#include <exception>

#include "attn/error.hpp"
#include "plugin/plugin_text.hpp"

namespace attn::detail {
namespace {

// What the active exception says, whatever its type.
std::string current_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    const std::string what = plain_text(e.what());
    return what.empty() ? "an exception with no message" : what;
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Calls f(args...); anything but attn::Error becomes one naming the backend and the callback.
template <typename F, typename... Args>
auto call_contained(const std::string& backend, const char* callback, const F& f, const Args&... args) {
  try {
    return f(args...);
  } catch (const Error& e) {
    if (is_plain_text(e.what())) throw;
    throw Error(plain_text(e.what()));
  } catch (...) {
    throw Error("backend '" + backend + "': " + callback + " threw: " + current_message());
  }
}

}  // namespace

BackendFactory contained_factory(const std::string& backend, BackendFactory create) {
  if (!create) return create;
  return [backend, f = std::move(create)](const LayerParams& p) {
    auto impl = call_contained(backend, "create()", f, p);
    if (!impl) throw Error("backend '" + backend + "': create() returned null, expected an implementation of the layer");
    return impl;
  };
}

void contain_callbacks(BackendDescriptor& d) {
  const std::string name = d.name;
  if (d.extra_checks) {
    // A check that throws cannot vouch for the layer: the backend is not valid, and says why.
    d.extra_checks = [f = std::move(d.extra_checks)](const LayerConfig& c, const Platform& p) -> std::vector<Reason> {
      try {
        std::vector<Reason> reasons = f(c, p);
        for (Reason& r : reasons) {
          r.field = ReasonFieldName(plain_text(r.field.name()));
          r.value = plain_text(r.value);
          r.expected = plain_text(r.expected);
        }
        return reasons;
      } catch (...) {
        return {Reason{"extra_checks", "threw: " + current_message(), "checks that return their reasons"}};
      }
    };
  }
  if (d.variant)
    d.variant = [name, f = std::move(d.variant)](const Platform& p, const LayerConfig& c) {
      return plain_text(call_contained(name, "variant()", f, p, c));
    };
  if (d.variants)
    d.variants = [name, f = std::move(d.variants)](const Platform& p) {
      std::vector<std::string> names = call_contained(name, "variants()", f, p);
      for (std::string& v : names) v = plain_text(v);
      return names;
    };
  d.create = contained_factory(name, std::move(d.create));
}

}  // namespace attn::detail
