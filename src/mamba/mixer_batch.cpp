// MixerBatch: query_start_loc + state slot + has_initial_state per sequence, validated.
#include <sstream>
#include <vector>

#include "attn/error.hpp"
#include "attn/mamba.hpp"

namespace attn {

MixerBatch MixerBatch::build(const std::vector<int32_t>& query_lens, const std::vector<int32_t>& state_slots,
                             const std::vector<uint8_t>& has_initial_state, int32_t num_slots) {
  require(state_slots.size() == query_lens.size(), "state_slots.size()", state_slots.size(),
          "one slot per sequence (" + std::to_string(query_lens.size()) + ")");
  require(has_initial_state.size() == query_lens.size(), "has_initial_state.size()", has_initial_state.size(),
          "one flag per sequence (" + std::to_string(query_lens.size()) + ")");
  MixerBatch md;
  md.num_seqs = int32_t(query_lens.size());
  md.query_start_loc.assign(1, 0);
  int64_t total = 0;
  for (std::size_t s = 0; s < query_lens.size(); ++s) {
    require(query_lens[s] >= 0, "query_lens[" + std::to_string(s) + "]", query_lens[s], ">= 0");
    total += query_lens[s];
    require(total <= INT32_MAX, "num_tokens", total, "< 2^31");
    md.query_start_loc.push_back(int32_t(total));
  }
  md.num_tokens = int32_t(total);
  md.state_slots = state_slots;
  md.has_initial_state = has_initial_state;
  md.validate(num_slots);
  return md;
}

void MixerBatch::validate(int32_t num_slots) const {
  require(num_seqs >= 0, "num_seqs", num_seqs, ">= 0");
  require(query_start_loc.size() == std::size_t(num_seqs) + 1, "query_start_loc.size()", query_start_loc.size(),
          "num_seqs + 1 = " + std::to_string(num_seqs + 1));
  require(state_slots.size() == std::size_t(num_seqs), "state_slots.size()", state_slots.size(),
          "num_seqs = " + std::to_string(num_seqs));
  require(has_initial_state.size() == std::size_t(num_seqs), "has_initial_state.size()", has_initial_state.size(),
          "num_seqs = " + std::to_string(num_seqs));
  require(query_start_loc[0] == 0, "query_start_loc[0]", query_start_loc[0], "0");
  std::vector<int32_t> owner(std::size_t(num_slots > 0 ? num_slots : 0), -1);
  for (int32_t s = 0; s < num_seqs; ++s) {
    const std::string index = std::to_string(s);
    const std::string i = "[" + index + "]";
    require(query_start_loc[s + 1] >= query_start_loc[s], "query_start_loc" + i + "+1", query_start_loc[s + 1],
            ">= query_start_loc" + i + " = " + std::to_string(query_start_loc[s]) + " (monotone)");
    const int32_t slot = state_slots[s];
    require(slot >= 0 && slot < num_slots, "state_slots" + i, slot,
            "a state slot in [0, " + std::to_string(num_slots) + ")");
    require(owner[slot] < 0, "state_slots" + i, slot,
            "a slot no other sequence of the batch uses (sequence " + std::to_string(owner[slot]) + " has it)");
    owner[slot] = s;
    require(has_initial_state[s] <= 1, "has_initial_state" + i, int(has_initial_state[s]), "0 or 1");
  }
  require(query_start_loc[num_seqs] == num_tokens, "num_tokens", num_tokens,
          "query_start_loc[num_seqs] = " + std::to_string(query_start_loc[num_seqs]));
}

std::string MixerBatch::to_string() const {
  std::ostringstream os;
  os << "MixerBatch(num_seqs=" << num_seqs << ", num_tokens=" << num_tokens << ", seqs=[";
  for (int32_t s = 0; s < num_seqs; ++s) {
    os << (s ? ", " : "") << "{len=" << query_len(s) << ", slot=" << state_slots[s]
       << ", init=" << int(has_initial_state[s]) << "}";
  }
  os << "])";
  return os.str();
}

}  // namespace attn
