// attn._core: tensor-parallel head sharding and pipeline stages (attn/parallel.hpp), the rule
// `attn plan --tensor-parallel` uses.
#include <nanobind/stl/pair.h>

#include "attn/parallel.hpp"
#include "bind.hpp"

namespace attn::py {

void bind_parallel(nb::module_& m) {
  nb::class_<HeadSharding>(m, "HeadSharding", "How one attention layer's heads spread over tensor-parallel ranks (vLLM's rule).")
      .def_ro("tensor_parallel", &HeadSharding::tensor_parallel)
      .def_ro("num_heads", &HeadSharding::num_heads, "query heads per rank")
      .def_ro("num_kv_heads", &HeadSharding::num_kv_heads, "KV heads per rank")
      .def_ro("kv_head_replicas", &HeadSharding::kv_head_replicas, "ranks holding each KV head (1: split, not copied)")
      .def("first_head", &HeadSharding::first_head, nb::arg("rank"), "the rank's first global query head")
      .def("first_kv_head", &HeadSharding::first_kv_head, nb::arg("rank"), "the rank's first global KV head")
      .def("__repr__", [](const HeadSharding& s) {
        return "HeadSharding(tensor_parallel=" + std::to_string(s.tensor_parallel) + ", num_heads=" + std::to_string(s.num_heads) +
               ", num_kv_heads=" + std::to_string(s.num_kv_heads) + ", kv_head_replicas=" + std::to_string(s.kv_head_replicas) + ")";
      });
  m.def("shard_heads", &shard_heads, nb::arg("config"), nb::arg("tensor_parallel"),
        "The sharding of a layer over tensor_parallel ranks; heads that do not divide raise attn.Error.");
  m.def("shard_layer_config", &shard_layer_config, nb::arg("config"), nb::arg("tensor_parallel"), "One rank's config of a layer.");
  m.def("shard_model", &shard_model, nb::arg("model"), nb::arg("tensor_parallel"), "One rank's share of every layer of a model.");
  m.def(
      "pipeline_stages",
      [](int num_layers, int pipeline_parallel) {
        std::vector<std::pair<int, int>> out;
        for (const LayerRange& r : pipeline_stages(num_layers, pipeline_parallel)) out.emplace_back(r.begin, r.end);
        return out;
      },
      nb::arg("num_layers"), nb::arg("pipeline_parallel"), "[(begin, end)] layer ranges of each pipeline stage (vLLM's split).");
}

}  // namespace attn::py
