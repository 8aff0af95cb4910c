#pragma once
// attn.Attention as layer.cpp (construction, caches, metadata) and step.cpp (plan / run /
// forward, StepPlan, Workspace) both see it.
#include <memory>
#include <vector>

#include "attn/layer.hpp"
#include "bind.hpp"

namespace attn::py {

/// attn.Attention is the library's Layer: the selector's decision and the backend implementation
/// built for it. It holds no per-call state, so any number of threads may run it.
using Attention = attn::Layer;

/// numpy.empty for an output: like `q` (same array type and dtype) when q can make one.
nb::object new_output_like(nb::handle q, const std::vector<int64_t>& shape, DType dtype);
/// TypeError unless the array has the layer dtype.
void require_dtype(const ArrayArg& a, const char* arg, DType want);
/// ValueError unless the array lives where the layer's backend runs (a CPU kernel handed a GPU
/// pointer would crash).
void require_device(const Attention& a, const ArrayArg& x, const char* arg);

/// attn.StepPlan, attn.Workspace and Attention.plan / run / forward.
void bind_step(nb::module_& m, nb::class_<Attention>& attention);

}  // namespace attn::py
