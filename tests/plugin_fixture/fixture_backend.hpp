#pragma once
// The descriptor every fixture plugin starts from: one float32 layer shape, so each fixture is
// selected only for the head size it names and never disturbs other tests' selections. Its
// factory refuses to build (the registry wants one); a fixture that runs sets its own.
#include <string>

#include "attn/error.hpp"

#include "attn/registry.hpp"

inline attn::BackendDescriptor fixture_backend(std::string name, std::string summary, int head_size, int priority) {
  attn::BackendDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  d.caps.dtypes = {attn::DType::float32};
  d.caps.head_sizes = attn::SizeRule::one_of({head_size});
  d.caps.kv_cache_dtypes = {attn::KVCacheDType::auto_};
  d.priority = priority;
  d.create = [name = d.name](const attn::LayerParams&) -> std::unique_ptr<attn::AttentionImpl> {
    throw attn::Error("fixture backend " + name + " has no kernel");
  };
  return d;
}
