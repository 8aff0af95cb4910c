#pragma once
/// Mamba-family mixers: state-space (Mamba-1, Mamba-2 SSD), LFM2 gated short convolution,
/// MiniMax-style linear attention with per-head decay and Qwen3-Next gated delta net; their
/// per-slot state cache, batch metadata, backends and `select_mamba` (vLLM's
/// get_mamba_attn_backend). Every tensor is float32; T = tokens of all sequences concatenated.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "attn/capabilities.hpp"
#include "attn/layer_config.hpp"
#include "attn/platform.hpp"
#include "attn/selector.hpp"
#include "attn/step.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// Shapes of one mixer layer. The fields each type reads:
///   mamba1:     d_inner, d_state, d_conv
///   mamba2:     num_heads, head_dim (d_inner = num_heads * head_dim), d_state, n_groups, d_conv
///   short_conv: d_inner (hidden size), d_conv (LFM2's conv_L_cache)
///   linear:     num_heads, head_k_dim, head_v_dim (no convolution)
///   gdn:        num_k_heads, num_heads (value heads, a multiple of num_k_heads), head_k_dim,
///               head_v_dim, d_conv
///   custom:     d_inner, d_state, d_conv (state shaped like mamba1; the backend defines the rest)
struct MixerConfig {
  MambaType type = MambaType::mamba1;
  int d_inner = 0;
  int d_state = 0;
  int d_conv = 0;        // conv kernel width; the conv state keeps d_conv - 1 inputs
  int n_groups = 1;
  int num_heads = 0;
  int head_dim = 0;
  int num_k_heads = 0;
  int head_k_dim = 0;
  int head_v_dim = 0;

  /// Channels of the causal conv: mamba1/short_conv/custom d_inner; mamba2 d_inner + 2·n_groups·d_state;
  /// gdn 2·num_k_heads·head_k_dim + num_heads·head_v_dim; linear 0.
  int conv_dim() const;
  /// Output features per token (mamba1/2, short_conv: d_inner; linear/gdn: num_heads·head_v_dim).
  int out_dim() const;
  /// The output of `tokens` tokens: [T, d_inner] (mamba1/2, short_conv) or [T, num_heads, head_v_dim].
  std::vector<int64_t> out_shape(int64_t tokens) const;
  /// mamba2, linear and gdn prefill have a chunked form distinct from the recurrence.
  bool has_chunked_form() const;
  std::vector<int64_t> conv_state_shape(int32_t slots) const;  // [slots, conv_dim, d_conv - 1]
  /// mamba1 [slots, d_inner, d_state]; mamba2 [slots, heads, head_dim, d_state];
  /// linear / gdn [slots, heads, head_k_dim, head_v_dim]; short_conv [slots, 0].
  std::vector<int64_t> ssm_state_shape(int32_t slots) const;
  /// Rejects zero / negative sizes and heads that do not divide (attn::Error naming the field).
  void validate() const;
  std::string to_string() const;
  /// From ModelLayer::mixer_dims. Keys: d_inner, d_state, d_conv, n_groups, num_heads, head_dim,
  /// num_k_heads, head_k_dim, head_v_dim; a missing required key → attn::Error naming it.
  static MixerConfig from_dims(MambaType type, const std::map<std::string, double>& dims);
  bool operator==(const MixerConfig&) const = default;
};

/// The layer's weights the kernels apply (projections stay outside: inputs arrive projected).
struct MixerParams {
  MixerConfig config;
  /// Log-decay rates, all <= 0: mamba1 [d_inner, d_state] and mamba2 / gdn [num_heads] are
  /// A = -exp(A_log); linear [num_heads] is -slope (state decays by exp(A) per token).
  std::vector<float> A;
  std::vector<float> D;            // skip: mamba1 [d_inner], mamba2 [num_heads]; empty = 0
  std::vector<float> dt_bias;      // mamba1 [d_inner], mamba2 / gdn [num_heads]; empty = 0
  std::vector<float> conv_weight;  // [conv_dim, d_conv]
  std::vector<float> conv_bias;    // [conv_dim]; empty = no bias
  float scale = 0.0f;              // q scale (linear, gdn); 0 → 1 for linear, 1/sqrt(head_k_dim) for gdn
  /// Prefill chunk length of the chunked forms (mamba2, linear, gdn); 0 = run prefill with the
  /// sequential recurrence (the baseline the chunked form is measured against).
  int chunk_size = 64;
  int num_threads = 0;             // 0 → all cores

  float effective_scale() const;
  /// Throws attn::Error if a weight vector's length does not match the config.
  void validate() const;
};

/// Per-token inputs, already projected (float32, contiguous). Which fields each type reads:
struct MixerInputs {
  /// Before the conv: mamba1 x [T, d_inner]; mamba2 xBC [T, conv_dim] (x | B | C);
  /// short_conv BCx [T, 3·d_inner] (B | C | x); gdn qkv [T, conv_dim] (q | k | v);
  /// linear q [T, num_heads, head_k_dim].
  TensorView x;
  /// True when `x` already went through MixerImpl::conv this step (Mamba-1 computes dt, B, C
  /// from the conv output, so a real Mamba-1 layer calls conv(), projects, then forward()).
  bool x_is_convolved = false;
  TensorView k, v;  // linear: [T, num_heads, head_k_dim], [T, num_heads, head_v_dim]
  TensorView dt;    // before dt_bias and softplus: mamba1 [T, d_inner]; mamba2 [T, num_heads]; gdn a [T, num_heads]
  TensorView B, C;  // mamba1: [T, d_state]
  TensorView b;     // gdn: [T, num_heads], before the sigmoid that gives beta
  TensorView z;     // optional gate, y *= silu(z): mamba1 / mamba2 [T, d_inner]
};

/// Up to three extents: what follows the token (or slot) index in a mixer tensor's shape.
struct MixerShape {
  MixerShape() = default;
  MixerShape(std::initializer_list<int64_t> extents);
  int rank = 0;
  int64_t dims[3] = {0, 0, 0};
  int64_t numel() const;
  std::vector<int64_t> after(int64_t leading) const;  // {leading, dims...}
};

/// One mixer type's row of the per-type table: everything the shared code knows of a type
/// (config fields, conv, state and output shapes, weights, per-token inputs). A new type is a
/// row in src/mamba/mixer_types.cpp, its backend folder and a line in src/mamba/mixer_list.inc.
struct MixerTypeInfo {
  /// A MixerConfig field the type reads: its mixer_dims key, whether validate() requires it
  /// > 0, and its default when mixer_dims lacks it (from the fields read before it; null: required).
  struct Dim {
    const char* key;
    int MixerConfig::*field;
    bool positive;
    int (*fallback)(const MixerConfig&);
  };
  /// A weight vector of MixerParams; [lo, hi]: the values random test and demo weights draw.
  struct Weight {
    const char* name;
    std::vector<float> MixerParams::*field;
    int64_t (*size)(const MixerConfig&);
    bool optional;  // empty allowed
    float lo, hi;
  };
  /// A per-token input of MixerInputs, [T, shape...], float32 and contiguous; `name` is what
  /// errors call it. [lo, hi]: the values random test and demo inputs draw.
  struct Input {
    enum class When : uint8_t { always, raw, convolved };  // raw / convolved: by MixerInputs::x_is_convolved
    const char* name;
    TensorView MixerInputs::*field;
    MixerShape (*shape)(const MixerConfig&);
    bool optional;  // may be absent (null data)
    When when;
    float lo, hi;
  };

  MambaType type;
  std::vector<Dim> dims;                    // in from_dims order (validate() checks them in it too)
  void (*check)(const MixerConfig&);        // rules across fields (divisibility, sums); may be null
  int (*conv_dim)(const MixerConfig&);      // 0: no convolution
  bool conv_silu;                           // SiLU after the conv
  MixerShape (*ssm_state)(const MixerConfig&);  // per slot; heads (or channels) first
  MixerShape (*out)(const MixerConfig&);        // per token
  bool chunked;                             // has a chunked prefill form (MixerParams::chunk_size)
  const char* scan_unit;                    // what the scan splits into tasks: "heads" / "channels"
  float (*default_scale)(const MixerConfig&);  // MixerParams::scale 0 → this; null → 1
  std::vector<Weight> weights;              // besides conv_weight [conv_dim, d_conv] and conv_bias [conv_dim]
  std::vector<Input> inputs;                // in the order they are checked
};
/// The row of `type` (every MambaType has one).
const MixerTypeInfo& mixer_type_info(MambaType type);

/// The step's sequences as a mixer sees them: where each one's tokens are, which state slot it
/// owns, and whether that slot holds a state to continue (chunked prefill, prefix reuse, decode)
/// or must be treated as zero (a fresh prefill). The final state is always written back.
struct MixerBatch {
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;
  std::vector<int32_t> query_start_loc;    // [num_seqs + 1], prefix sums of new-token counts
  std::vector<int32_t> state_slots;        // [num_seqs], distinct, in [0, num_slots)
  std::vector<uint8_t> has_initial_state;  // [num_seqs], 0 / 1

  int32_t query_len(int s) const { return query_start_loc[s + 1] - query_start_loc[s]; }
  static MixerBatch build(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& state_slots,
                          const std::vector<uint8_t>& has_initial_state, int32_t num_slots);
  /// Re-validates hand-assembled metadata: sizes, monotone query_start_loc, slots in range and
  /// distinct (two sequences updating one slot would race), flags 0 / 1.
  void validate(int32_t num_slots) const;
  std::string to_string() const;
};

/// Per-slot states of one mixer layer (the analogue of the paged KV cache), float32, zeroed.
class MambaStateCache {
 public:
  MambaStateCache(const MixerConfig& config, int32_t num_slots);

  const MixerConfig& config() const { return config_; }
  int32_t num_slots() const { return num_slots_; }
  TensorView conv_state() const;  // config.conv_state_shape(num_slots)
  TensorView ssm_state() const;   // config.ssm_state_shape(num_slots)
  int64_t conv_slot_floats() const { return conv_per_slot_; }
  int64_t ssm_slot_floats() const { return ssm_per_slot_; }
  float* conv_slot(int32_t slot) const;  // checked
  float* ssm_slot(int32_t slot) const;   // checked
  std::size_t bytes() const { return conv_.bytes() + ssm_.bytes(); }

  void reset_slot(int32_t slot);              // zero both states
  void copy_slot(int32_t src, int32_t dst);   // prefix reuse: fork a sequence's state
  void fill(float value);                     // tests: poison

 private:
  void check_slot(int32_t slot, const char* arg) const;
  MixerConfig config_;
  int32_t num_slots_ = 0;
  int64_t conv_per_slot_ = 0, ssm_per_slot_ = 0;
  Buffer conv_, ssm_;
};

/// A mixer backend's plan of one step (the mixer analogue of attn::StepPlan): the validated
/// batch and how it runs — which sequences take the chunked form (chunk boundaries every
/// chunk_size tokens) and which the recurrence, the task split of the conv and the scan, and the
/// scratch a run needs. It depends on the batch and the layer config, never on weights or states,
/// so one plan serves every mixer layer of the step with this backend and config. Immutable.
struct MixerPlan {
  std::string backend;
  MixerConfig config;
  int chunk_size = 0;   // the planner's MixerParams::chunk_size (0: every sequence recurrent)
  int threads = 1;      // OpenMP threads a run uses (one scratch block each)
  int32_t num_slots = 0;  // the state cache's slots the batch was validated against
  MixerBatch batch;
  int64_t head_block = 1;  // heads (mamba1: channels) per scan task
  /// conv task t of sequence s covers tokens [32·(t - conv_first_task[s]), +32); [num_seqs + 1].
  std::vector<int64_t> conv_first_task;
  int64_t buffer_floats = 0;   // the conv output a run keeps between conv and scan
  int64_t scratch_floats = 0;  // per thread, the largest task's (conv or scan)

  /// Sequence s runs the chunked form (else the token-by-token recurrence; empty: nothing).
  bool chunked(int s) const;
  int64_t num_chunks(int s) const;
  /// Scratch bytes a run needs (Workspace::reserve): the conv buffer and one block per thread.
  std::size_t workspace_bytes() const;
  std::size_t thread_scratch_offset() const;  // bytes: where the per-thread blocks start
  std::size_t thread_scratch_stride() const;  // bytes between two threads' blocks (64-aligned)
  std::string to_string() const;
};

/// Everything one mixer layer's run reads and writes. Views only: nothing is copied or kept.
struct MixerArgs {
  MixerInputs in;
  MambaStateCache* state = nullptr;  // the layer's states, updated in place
  TensorView out;                    // [T, d_inner] or [T, num_heads, head_v_dim]
  Workspace* workspace = nullptr;    // null: the run allocates its own scratch (convenience path)
};

/// One mixer layer served by one backend: plan once per step, run once per layer. Holds only
/// what `create` set up; run() and conv() are const and safe to call from several threads for
/// different layers (one Workspace each). The built-ins share one implementation of this
/// interface (src/mamba/mixer_base.hpp); a custom mixer may wrap one (create_mixer) or implement it.
class MixerImpl {
 public:
  virtual ~MixerImpl() = default;
  const MixerParams& params() const { return params_; }
  const std::string& backend_name() const { return backend_; }

  /// Validates the step's batch against a state cache of `num_slots` slots once and plans the
  /// work (see MixerPlan). Serves every layer with this backend, config, chunk_size and threads.
  virtual std::shared_ptr<const MixerPlan> plan(const MixerBatch& md, int32_t num_slots) const = 0;
  /// The whole mixer for a mixed batch of prefill and decode sequences under `plan`. Checks are
  /// O(1); with a workspace of plan.workspace_bytes() the run allocates nothing.
  virtual void run(const MixerPlan& plan, const MixerArgs& args) const = 0;
  /// One call: plan + run with a scratch of its own (tests, one-off calls). out: [T, d_inner]
  /// (mamba1, mamba2, short_conv) or [T, num_heads, head_v_dim] (linear, gdn).
  void forward(const MixerInputs& in, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const;

  /// Causal depthwise conv1d over this step's tokens, continuing each sequence's conv state and
  /// leaving its last d_conv - 1 inputs behind; SiLU after it except for short_conv.
  /// x, out: [T, conv_dim] (out may alias x only if it is a distinct buffer: no in-place).
  virtual void conv(const MixerPlan& plan, const TensorView& x, MambaStateCache& state, const TensorView& out,
                    Workspace* workspace = nullptr) const = 0;
  void conv(const TensorView& x, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const;
  /// The kernel variant that runs ("avx512" / "generic"), fixed when the mixer is created: the
  /// best this CPU runs, or the build env ATTN_CPU_ISA forces (avx512_bf16 / amx run avx512,
  /// avx2 runs generic; an unknown name or a build this CPU cannot run → attn::Error).
  virtual std::string variant() const = 0;

 protected:
  /// Validates `params` (attn::Error naming the field).
  explicit MixerImpl(MixerParams params);
  MixerParams params_;

 private:
  friend class MixerRegistry;  // names the backend that made it
  std::string backend_;
};

/// What a mixer backend serves, as data. check_mixer_capabilities turns MixerCapabilities ×
/// MambaType × Platform into Reasons in a fixed order — platform, mamba_type, then
/// compute_capability (cuda) or cpu_features (cpu) — with the platform checks of the attention
/// backends' check_capabilities.
struct MixerCapabilities {
  std::vector<MambaType> types;                      // the mixer types it serves
  std::vector<PlatformKind> platforms{PlatformKind::cpu};
  std::vector<CpuFeature> required_cpu_features;     // all required (cpu platform)
  std::optional<ComputeCapability> min_cc, max_cc;   // cuda platform
};
std::vector<Reason> check_mixer_capabilities(const MixerCapabilities& caps, MambaType type, const Platform& platform);

struct MixerDescriptor {
  std::string name;
  std::string summary;
  MixerCapabilities caps;
  std::function<std::string(const Platform&)> variant;
  std::function<std::unique_ptr<MixerImpl>(const MixerParams&)> create;
};

/// The mixer backends: the built-ins (src/mamba/mixer_list.inc), then what add() registered, in
/// that order. No static-initializer self-registration: the list is filled on first use.
class MixerRegistry {
 public:
  /// The process-wide registry (register_mixer, mixer_backends, find_mixer and create_mixer use it).
  static MixerRegistry& instance();
  /// A registry of its own holding the built-ins only: what a caller adds to it (a test's
  /// stand-in mixers) never reaches instance(). Select from it with MambaSelectOptions::registry.
  static std::unique_ptr<MixerRegistry> with_builtins();

  /// Adds a mixer backend (how a `custom` mixer is provided). Throws attn::Error for an empty
  /// name, no types served, a null factory, or a name already registered.
  void add(MixerDescriptor desc);
  std::vector<std::shared_ptr<const MixerDescriptor>> backends() const;
  std::shared_ptr<const MixerDescriptor> find(const std::string& name) const;  // names ignore case
  std::vector<std::string> names() const;
  /// Builds a mixer; unknown name, or a type the backend does not serve → attn::Error listing
  /// what is known.
  std::unique_ptr<MixerImpl> create(const std::string& backend, const MixerParams& params) const;
  /// Changes on every add(), and no two registries share a value; select_mamba's memo keys on it.
  uint64_t generation() const;

  MixerRegistry();  // empty; instance() and with_builtins() add the built-ins

 private:
  mutable std::shared_mutex mu_;
  std::vector<std::shared_ptr<const MixerDescriptor>> list_;
  uint64_t generation_;
};

/// MixerRegistry::instance().add(desc).
void register_mixer(MixerDescriptor desc);
/// MixerRegistry::instance().backends(): built-ins then registered ones, in order.
std::vector<std::shared_ptr<const MixerDescriptor>> mixer_backends();
std::shared_ptr<const MixerDescriptor> find_mixer(const std::string& name);
/// MixerRegistry::instance().create(backend, params).
std::unique_ptr<MixerImpl> create_mixer(const std::string& backend, const MixerParams& params);

struct MambaSelectOptions {
  std::string backend;      // forced ("" or "auto" = none): highest precedence
  bool use_env = true;      // then env ATTN_MAMBA_BACKEND
  std::optional<Platform> platform;  // default: this machine's CPU
  MixerRegistry* registry = nullptr;  // the mixers to choose from; default MixerRegistry::instance()
};

/// The mixer backend for a layer type on the platform: the first registered one whose
/// capabilities serve both (mamba1→mamba1, mamba2→mamba2, short_conv→short_conv,
/// linear_attention→linear, gdn_attention→gdn, custom→the registered one; every built-in is a CPU
/// mixer). Memoised and thread-safe like select() (the same memo, forced-backend precedence and
/// unknown-backend error; names ignore case). The Decision has no config; its notes name the
/// type, its candidates list every mixer backend with its reasons (platform, mamba_type, ...).
/// None valid → attn::Error listing each candidate with its reasons.
Decision select_mamba(MambaType type, const MambaSelectOptions& options = {});
/// Same as select_mamba() but returns the decision even when no mixer backend is valid (backend
/// empty; the candidates carry the reasons). Forced-backend errors still throw.
Decision explain_mamba(MambaType type, const MambaSelectOptions& options = {});
void clear_mamba_selector_cache();
SelectorCacheStats mamba_selector_cache_stats();

}  // namespace attn
