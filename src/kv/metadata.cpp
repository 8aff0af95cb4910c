#include "attn/metadata.hpp"

#include <algorithm>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/layer_config.hpp"
#include "attn/limits.hpp"

namespace attn {
namespace {
std::string seq_arg(int s, const char* field) { return "seqs[" + std::to_string(s) + "]." + field; }
int64_t blocks_needed(int64_t tokens, int32_t block_size) { return (tokens + block_size - 1) / block_size; }

/// A block that receives this step's tokens must appear once in its sequence's table: twice,
/// two positions would share its slots and one write would overwrite the other token's keys.
/// Blocks that only hold cached context may repeat (an engine's null block standing in for
/// blocks a sliding window dropped), and sequences may share blocks (a common prefix).
void require_distinct_written_blocks(int s, const SequenceSpec& q, int64_t need, int32_t block_size) {
  if (q.query_len == 0) return;
  const int64_t first_written = q.context_len / block_size;
  std::vector<std::pair<int32_t, int64_t>> sorted(std::size_t(need), {0, 0});
  for (int64_t b = 0; b < need; ++b) sorted[std::size_t(b)] = {q.block_ids[std::size_t(b)], b};
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t lo = 0, hi = 0; lo < sorted.size(); lo = hi) {
    while (hi < sorted.size() && sorted[hi].first == sorted[lo].first) ++hi;
    if (hi - lo < 2) continue;
    for (std::size_t i = lo; i < hi; ++i) {
      if (sorted[i].second < first_written) continue;
      const int64_t other = sorted[i == lo ? lo + 1 : lo].second;
      throw Error(seq_arg(s, "block_ids") + std::string("[") + std::to_string(sorted[i].second) + "]=" +
                  std::to_string(sorted[i].first) + " invalid: expected distinct blocks within one sequence for the "
                  "blocks this step writes (block " + std::to_string(sorted[i].first) + " is also block_ids[" +
                  std::to_string(other) + "])");
    }
  }
}

}  // namespace

BatchMetadata BatchMetadata::build(const std::vector<SequenceSpec>& seqs, int32_t block_size, int32_t num_blocks, bool causal) {
  check_block_size("block_size", block_size);
  check_num_blocks("num_blocks", num_blocks);
  check_range("num_seqs", int64_t(seqs.size()), 0, limits::kMaxTokens, "sequences of one step");
  BatchMetadata md;
  md.num_seqs = int32_t(seqs.size());
  md.block_size = block_size;
  md.causal = causal;
  int64_t total = 0, max_blocks = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const SequenceSpec& q = seqs[s];
    ATTN_REQUIRE(q.context_len >= 0, seq_arg(int(s), "context_len"), q.context_len, ">= 0");
    ATTN_REQUIRE(q.query_len >= 0, seq_arg(int(s), "query_len"), q.query_len, ">= 0");
    // Checked: a wrapped sum goes negative, needs no blocks and lets the copy below read past
    // block_ids. Both terms are >= 0, so the test below cannot wrap; checked_sum runs only to
    // report a sum out of range, naming the sequence.
    const bool fits = q.context_len <= limits::kMaxSeqLen && q.query_len <= limits::kMaxSeqLen - q.context_len;
    const int64_t len = fits ? q.context_len + q.query_len
                             : checked_sum(seq_arg(int(s), "context_len + query_len"), {q.context_len, q.query_len},
                                           limits::kMaxSeqLen, "tokens of one sequence");
    const int64_t need = blocks_needed(len, block_size);
    ATTN_REQUIRE(int64_t(q.block_ids.size()) >= need, seq_arg(int(s), "block_ids.size()"), q.block_ids.size(),
            ">= " + std::to_string(need) + " blocks for " + std::to_string(len) + " tokens of block_size " + std::to_string(block_size));
    for (std::size_t b = 0; b < std::size_t(need); ++b)
      ATTN_REQUIRE(q.block_ids[b] >= 0 && q.block_ids[b] < num_blocks,
              seq_arg(int(s), "block_ids") + std::string("[") + std::to_string(b) + "]", q.block_ids[b],
              "a block id in [0, " + std::to_string(num_blocks) + ")");
    require_distinct_written_blocks(int(s), q, need, block_size);
    total = checked_sum("num_tokens", {total, q.query_len}, limits::kMaxTokens, "query tokens of one step, summed over sequences");
    max_blocks = std::max(max_blocks, need);
    ATTN_REQUIRE(q.mm_start >= 0 && q.mm_start <= q.mm_end && q.mm_end <= len, seq_arg(int(s), "mm_start/mm_end"),
                 std::to_string(q.mm_start) + "/" + std::to_string(q.mm_end),
                 "0 <= mm_start <= mm_end <= context_len + query_len = " + std::to_string(len));
    if (q.mm_end > q.mm_start) md.mm_prefix_ranges.resize(seqs.size() * 2, 0);
  }
  checked_product("num_seqs * max_blocks_per_seq", {int64_t(seqs.size()), max_blocks}, limits::kMaxTokens,
                  "entries of the block table");
  md.num_tokens = int32_t(total);
  md.max_blocks_per_seq = int32_t(max_blocks);
  md.query_start_loc.assign(seqs.size() + 1, 0);
  md.seq_lens.resize(seqs.size());
  md.block_table.assign(seqs.size() * std::size_t(max_blocks), -1);
  md.slot_mapping.reserve(std::size_t(total));
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const SequenceSpec& q = seqs[s];
    md.query_start_loc[s + 1] = md.query_start_loc[s] + int32_t(q.query_len);
    md.seq_lens[s] = int32_t(q.context_len + q.query_len);
    md.max_query_len = std::max(md.max_query_len, int32_t(q.query_len));
    md.max_seq_len = std::max(md.max_seq_len, md.seq_lens[s]);
    const int64_t need = blocks_needed(md.seq_lens[s], block_size);
    std::copy(q.block_ids.begin(), q.block_ids.begin() + need, md.block_table.begin() + int64_t(s) * max_blocks);
    if (!md.mm_prefix_ranges.empty())
      md.mm_prefix_ranges[2 * s] = int32_t(q.mm_start), md.mm_prefix_ranges[2 * s + 1] = int32_t(q.mm_end);
    for (int64_t i = 0; i < q.query_len; ++i) {
      const int64_t pos = q.context_len + i;
      md.slot_mapping.push_back(int64_t(q.block_ids[pos / block_size]) * block_size + pos % block_size);
    }
  }
  return md;
}

void BatchMetadata::validate(int32_t num_blocks, int32_t cache_block_size) const {
  check_block_size("block_size", cache_block_size);
  check_num_blocks("num_blocks", num_blocks);
  ATTN_REQUIRE(block_size == cache_block_size, "metadata.block_size", block_size,
          "the cache's block_size " + std::to_string(cache_block_size));
  ATTN_REQUIRE(num_seqs >= 0, "metadata.num_seqs", num_seqs, ">= 0");
  ATTN_REQUIRE(int64_t(query_start_loc.size()) == int64_t(num_seqs) + 1, "metadata.query_start_loc.size()", query_start_loc.size(),
          "num_seqs + 1 = " + std::to_string(int64_t(num_seqs) + 1));
  ATTN_REQUIRE(query_start_loc[0] == 0, "metadata.query_start_loc[0]", query_start_loc[0], "0");
  ATTN_REQUIRE(int64_t(seq_lens.size()) == num_seqs, "metadata.seq_lens.size()", seq_lens.size(), "num_seqs = " + std::to_string(num_seqs));
  ATTN_REQUIRE(max_blocks_per_seq >= 0, "metadata.max_blocks_per_seq", max_blocks_per_seq, ">= 0");
  ATTN_REQUIRE(int64_t(block_table.size()) == int64_t(num_seqs) * max_blocks_per_seq, "metadata.block_table.size()",
          block_table.size(), "num_seqs * max_blocks_per_seq = " + std::to_string(int64_t(num_seqs) * max_blocks_per_seq));
  // query_start_loc first, as a whole: the per-sequence checks below read query lengths from it,
  // and the error must name the entry that is out of order.
  for (int i = 1; i <= num_seqs; ++i)
    ATTN_REQUIRE(query_start_loc[i] >= query_start_loc[i - 1], "metadata.query_start_loc[" + std::to_string(i) + "]",
            query_start_loc[i], "non-decreasing (>= " + std::to_string(query_start_loc[i - 1]) + ")");
  int32_t max_q = 0, max_s = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const auto at = [s] { return std::string("[") + std::to_string(s) + "]"; };  // built only for a failing check
    ATTN_REQUIRE(seq_lens[s] >= 0, "metadata.seq_lens" + at(), seq_lens[s], ">= 0");
    ATTN_REQUIRE(seq_lens[s] >= query_len(s), "metadata.seq_lens" + at(), seq_lens[s],
            ">= the sequence's query length " + std::to_string(query_len(s)));
    const int64_t need = blocks_needed(seq_lens[s], block_size);
    ATTN_REQUIRE(need <= max_blocks_per_seq, "metadata.seq_lens" + at(), seq_lens[s],
            "<= max_blocks_per_seq * block_size = " + std::to_string(int64_t(max_blocks_per_seq) * block_size));
    for (int64_t b = 0; b < need; ++b) {
      const int32_t id = blocks(s)[b];
      ATTN_REQUIRE(id >= 0 && id < num_blocks, "metadata.block_table[" + std::to_string(s) + "][" + std::to_string(b) + "]", id,
              "a block id in [0, " + std::to_string(num_blocks) + ")");
    }
    max_q = std::max(max_q, query_len(s));
    max_s = std::max(max_s, seq_lens[s]);
  }
  ATTN_REQUIRE(query_start_loc[num_seqs] == num_tokens, "metadata.query_start_loc[num_seqs]", query_start_loc[num_seqs],
          "num_tokens = " + std::to_string(num_tokens));
  ATTN_REQUIRE(max_query_len >= max_q, "metadata.max_query_len", max_query_len, ">= " + std::to_string(max_q));
  ATTN_REQUIRE(max_seq_len >= max_s, "metadata.max_seq_len", max_seq_len, ">= " + std::to_string(max_s));
  ATTN_REQUIRE(mm_prefix_ranges.empty() || int64_t(mm_prefix_ranges.size()) == 2 * int64_t(num_seqs),
               "metadata.mm_prefix_ranges.size()", mm_prefix_ranges.size(), "0 or 2 * num_seqs = " + std::to_string(2 * int64_t(num_seqs)));
  for (int s = 0; s < int(mm_prefix_ranges.size() / 2); ++s) {
    const int32_t lo = mm_prefix_ranges[2 * s], hi = mm_prefix_ranges[2 * s + 1];
    ATTN_REQUIRE(lo >= 0 && lo <= hi && hi <= seq_lens[s], "metadata.mm_prefix_ranges[" + std::to_string(s) + "]",
                 std::to_string(lo) + ".." + std::to_string(hi),
                 "0 <= start <= end <= seq_lens[" + std::to_string(s) + "] = " + std::to_string(seq_lens[s]));
  }
  ATTN_REQUIRE(int64_t(slot_mapping.size()) == num_tokens || slot_mapping.empty(), "metadata.slot_mapping.size()",
          slot_mapping.size(), "num_tokens = " + std::to_string(num_tokens) + " (or empty)");
  check_slot_mapping(slot_mapping, int64_t(num_blocks) * block_size);
  // Each new token's slot is where the block table puts its position: a slot elsewhere would be
  // written and never read, while the kernels read a slot nobody wrote. -1 skips a token.
  for (int s = 0; s < int(slot_mapping.empty() ? 0 : num_seqs); ++s) {
    const int32_t ctx = context_len(s);
    for (int32_t i = 0; i < query_len(s); ++i) {
      const int64_t t = query_start_loc[s] + i, pos = int64_t(ctx) + i;
      const int64_t want = int64_t(blocks(s)[pos / block_size]) * block_size + pos % block_size;
      ATTN_REQUIRE(slot_mapping[std::size_t(t)] == -1 || slot_mapping[std::size_t(t)] == want,
                   "metadata.slot_mapping[" + std::to_string(t) + "]", slot_mapping[std::size_t(t)],
                   "-1 (skip) or " + std::to_string(want) + ", the slot block_table gives position " + std::to_string(pos) +
                       " of sequence " + std::to_string(s));
    }
  }
}

void check_slot_mapping(const std::vector<int64_t>& slot_mapping, int64_t num_slots) {
  for (std::size_t t = 0; t < slot_mapping.size(); ++t)
    ATTN_REQUIRE(slot_mapping[t] >= -1 && slot_mapping[t] < num_slots, "metadata.slot_mapping[" + std::to_string(t) + "]",
                 slot_mapping[t], "-1 (skip) or a slot in [0, " + std::to_string(num_slots) + ")");
  // Checked once per step (validate), so writing each layer's new K/V (KVCache::write_validated)
  // needs no sort or allocation of its own. The sorted copy lives in the thread's buffer, kept
  // between steps: a passing check allocates nothing once the buffer has grown.
  thread_local std::vector<int64_t> used;
  used.clear();
  used.reserve(slot_mapping.size());
  for (int64_t s : slot_mapping)
    if (s >= 0) used.push_back(s);
  std::sort(used.begin(), used.end());
  const auto dup = std::adjacent_find(used.begin(), used.end());
  ATTN_REQUIRE(dup == used.end(), "metadata.slot_mapping", *dup, "distinct slots (two tokens write one slot)");
}

void check_causal(const LayerConfig& layer, const BatchMetadata& md) {
  if (md.causal == layer.causal()) return;
  const std::string kind = layer.use_non_causal ? "use_non_causal" : std::string(attn::to_string(layer.attn_type));
  require(false, "metadata.causal", md.causal ? "true" : "false",
          std::string(layer.causal() ? "true" : "false") + " for this " + kind + " layer (" +
              (layer.causal() ? "causal" : "bidirectional") + " attention): build the step's metadata with causal=" +
              (layer.causal() ? "true" : "false"));
}

std::string BatchMetadata::to_string() const {
  std::string s = "BatchMetadata(num_seqs=" + std::to_string(num_seqs) + ", num_tokens=" + std::to_string(num_tokens) +
                  ", block_size=" + std::to_string(block_size) + ", max_query_len=" + std::to_string(max_query_len) +
                  ", max_seq_len=" + std::to_string(max_seq_len) + ", causal=" + (causal ? "true" : "false") + ")";
  return s;
}

}  // namespace attn
