// MixerBase::plan, its run-time checks, and MixerPlan: the step's batch validated once, the chunked / recurrent form
// of every sequence, the conv and scan task split and the scratch a run takes from a Workspace.
#include <omp.h>

#include <algorithm>
#include <sstream>

#include "attn/error.hpp"
#include "mamba/conv_kernel.hpp"
#include "mamba/mixer_base.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {

namespace {
constexpr std::size_t kAlign = 64;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

bool MixerPlan::chunked(int s) const { return chunk_size > 0 && batch.query_len(s) > 1; }

int64_t MixerPlan::num_chunks(int s) const {
  return chunked(s) ? (batch.query_len(s) + chunk_size - 1) / chunk_size : 0;
}

std::size_t MixerPlan::thread_scratch_offset() const { return aligned(std::size_t(buffer_floats) * sizeof(float)); }
std::size_t MixerPlan::thread_scratch_stride() const { return aligned(std::size_t(scratch_floats) * sizeof(float)); }
std::size_t MixerPlan::workspace_bytes() const {
  return thread_scratch_offset() + std::size_t(threads) * thread_scratch_stride();
}

std::string MixerPlan::to_string() const {
  std::ostringstream os;
  os << backend << " plan: " << config.to_string() << ", " << batch.num_seqs << " seqs, " << batch.num_tokens
     << " tokens, " << num_slots << " slots, chunk " << chunk_size << ", " << threads << " threads, " << head_block
     << " " << mixer_type_info(config.type).scan_unit << " per task, workspace " << workspace_bytes()
     << " bytes; seqs [";
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int32_t len = batch.query_len(s);
    os << (s ? ", " : "") << "{slot " << batch.state_slots[s] << ", " << len << " tokens at " << batch.query_start_loc[s]
       << (batch.has_initial_state[s] ? ", continues" : ", fresh") << ", ";
    if (len == 0) {
      os << "empty";
    } else if (chunked(s)) {
      os << "chunked: " << num_chunks(s) << " chunks at 0";
      for (int64_t c = 1; c < std::min<int64_t>(num_chunks(s), 4); ++c) os << "," << c * chunk_size;
      if (num_chunks(s) > 4) os << ",...";
    } else {
      os << "recurrent";
    }
    os << "}";
  }
  os << "]";
  return os.str();
}

int64_t mixer::MixerBase::plan_head_block(int32_t, int) const { return 1; }
int64_t mixer::MixerBase::scan_scratch_floats(int64_t, int64_t) const { return 0; }

std::shared_ptr<const MixerPlan> mixer::MixerBase::plan(const MixerBatch& md, int32_t num_slots) const {
  md.validate(num_slots);
  auto p = std::make_shared<MixerPlan>();
  const MixerConfig& c = params_.config;
  p->backend = backend_name();
  p->config = c;
  p->chunk_size = c.has_chunked_form() ? params_.chunk_size : 0;
  p->threads = cpu::team_size(params_.num_threads);
  p->num_slots = num_slots;
  p->batch = md;
  p->head_block = plan_head_block(md.num_seqs, p->threads);
  const int64_t dim = c.conv_dim();
  p->buffer_floats = int64_t(md.num_tokens) * dim;
  if (dim > 0) p->scratch_floats = mixer::conv_scratch_floats(dim, c.d_conv);
  p->conv_first_task.assign(std::size_t(md.num_seqs) + 1, 0);
  for (int s = 0; s < md.num_seqs; ++s) {
    const int64_t len = md.query_len(s);
    p->conv_first_task[s + 1] = p->conv_first_task[s] + (len + mixer::kConvTokens - 1) / mixer::kConvTokens;
    if (len > 0) p->scratch_floats = std::max(p->scratch_floats, scan_scratch_floats(len, p->head_block));
  }
  return p;
}

float* mixer::MixerBase::Scratch::mine() const {
  return reinterpret_cast<float*>(base + std::size_t(omp_get_thread_num()) * stride);
}

mixer::MixerBase::Scratch mixer::MixerBase::begin(const MixerPlan& plan, MambaStateCache* state_ptr, Workspace* workspace,
                                    Workspace& own) const {
  ATTN_REQUIRE(plan.backend == backend_name(), "plan.backend", plan.backend,
               "a plan made by " + backend_name() + " (this layer's backend)");
  ATTN_REQUIRE(plan.config == params_.config, "plan.config", plan.config.to_string(),
               "this layer's " + params_.config.to_string() + " (plans are shared only by equal configs)");
  const int chunk = params_.config.has_chunked_form() ? params_.chunk_size : 0;
  ATTN_REQUIRE(plan.chunk_size == chunk, "plan.chunk_size", plan.chunk_size, "this layer's chunk_size " + std::to_string(chunk));
  ATTN_REQUIRE(params_.num_threads <= 0 || plan.threads == params_.num_threads, "plan.threads", plan.threads,
               "this layer's num_threads " + std::to_string(params_.num_threads));
  ATTN_REQUIRE(state_ptr != nullptr, "args.state", "null", "the layer's state cache");
  const MambaStateCache& state = *state_ptr;
  ATTN_REQUIRE(state.config() == params_.config, "state.config", state.config().to_string(),
               "the layer's " + params_.config.to_string());
  ATTN_REQUIRE(state.num_slots() == plan.num_slots, "state.num_slots", state.num_slots(),
               "the " + std::to_string(plan.num_slots) + " slots the plan was made for");
  Workspace& ws = workspace ? *workspace : own;
  if (ws.bytes() < plan.workspace_bytes()) ws.reserve(plan.workspace_bytes());
  char* base = static_cast<char*>(ws.data());
  return {base + plan.thread_scratch_offset(), plan.thread_scratch_stride(), reinterpret_cast<float*>(base)};
}

void mixer::MixerBase::run(const MixerPlan& plan, const MixerArgs& args) const {
  Workspace own;
  const Scratch scratch = begin(plan, args.state, args.workspace, own);
  mixer::check_input(args.out, "out", plan.batch.num_tokens, mixer_type_info(params_.config.type).out(params_.config));
  run_checked(plan, args.in, *args.state, args.out, scratch);
}

}  // namespace attn
