// attn._core: the nanobind extension behind the `attn` package. Each bind_*.cpp adds one area.
#include "bind.hpp"

NB_MODULE(_core, m) {
  m.doc() = "attn: attention-backend selection and CPU attention kernels (C++ core)";
  attn::py::bind_errors(m);
  attn::py::bind_config(m);
  attn::py::bind_select(m);
  attn::py::bind_layer(m);
  attn::py::bind_parallel(m);
  attn::py::bind_tune(m);
}
