// no_attention: the placeholder for attention-free layers (Mamba-only models). Selecting it is
// valid; running attention through it is an error.
#include "attn/backend.hpp"
#include "attn/error.hpp"

namespace attn {
namespace {
class NoAttentionImpl final : public AttentionImpl {
 public:
  explicit NoAttentionImpl(const LayerParams& p) : AttentionImpl("no_attention", p) {}
  void write_kv(const TensorView&, const TensorView&, KVCache&, const BatchMetadata&) const override { fail("write_kv"); }
  std::shared_ptr<const StepPlan> plan(const BatchMetadata&, const KVCacheSpec&) const override { fail("plan"); }
  RunResult run(const StepPlan&, const ForwardArgs&) const override { fail("run"); }

 private:
  [[noreturn]] static void fail(const char* what) {
    throw Error(std::string("no_attention.") + what +
                ": this layer is attention-free (is_attention_free=true); it has no KV cache and no attention to run");
  }
};
}  // namespace

BackendDescriptor no_attention_descriptor() {
  BackendDescriptor d;
  d.name = "no_attention";
  d.summary = "placeholder for attention-free layers; forward is an error";
  d.caps.platforms = {PlatformKind::cpu, PlatformKind::cuda};
  d.caps.attention_free = true;
  d.priority = 0;
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<NoAttentionImpl>(p); };
  return d;
}

}  // namespace attn
