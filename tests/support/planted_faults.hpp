#pragma once
// Known kernel bugs, planted in the fp64 reference (reference_attention(c, fault)), so tests can
// prove the pass rule (tolerance table x generated inputs) rejects a kernel that has them.
#include <string>
#include <vector>

namespace attn::test {

enum class FaultKind {
  none,
  equal_weight_merge,  // split-KV partials averaged with equal weights instead of by their LSE
  drop_last_split,     // the last KV split of a row never merged
  missing_diagonal,    // causal mask k < q instead of k <= q: the query's own key dropped
  no_rescale,          // online softmax: running output not rescaled when the max grows
  scale_one_over_d,    // 1/d instead of 1/sqrt(d)
  window_off_by_one,   // sliding window keeps one key too many (pos >= q - window)
};

struct Fault {
  FaultKind kind = FaultKind::none;
  int split = 1024;  // KV positions per split / online-softmax chunk, aligned to absolute positions
};

/// Every fault, for sweeps.
std::vector<FaultKind> all_faults();
std::string to_string(FaultKind k);

}  // namespace attn::test
