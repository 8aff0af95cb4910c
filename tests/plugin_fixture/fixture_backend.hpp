#pragma once
// The descriptor every fixture plugin starts from: one float32 layer shape, so each fixture is
// selected only for the head size it names and never disturbs other tests' selections.
#include <string>

#include "attn/registry.hpp"

inline attn::BackendDescriptor fixture_backend(std::string name, std::string summary, int head_size, int priority) {
  attn::BackendDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  d.caps.dtypes = {attn::DType::float32};
  d.caps.head_sizes = attn::SizeRule::one_of({head_size});
  d.caps.kv_cache_dtypes = {attn::KVCacheDType::auto_};
  d.priority = priority;
  return d;
}
