// no_attention: the placeholder for attention-free layers (Mamba-only models). Selecting it is
// valid; running attention through it is an error.
#include "attn/backend.hpp"
#include "attn/error.hpp"

namespace attn {
namespace {
class NoAttentionImpl final : public AttentionImpl {
 public:
  void write_kv(const TensorView&, const TensorView&, KVCache&, const BatchMetadata&) override { fail("write_kv"); }
  void forward(const TensorView&, const KVCache&, const BatchMetadata&, const TensorView&) override { fail("forward"); }

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
  d.create = [](const LayerParams&) -> std::unique_ptr<AttentionImpl> { return std::make_unique<NoAttentionImpl>(); };
  return d;
}

}  // namespace attn
