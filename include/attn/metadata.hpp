#pragma once
/// BatchMetadata: built once per engine step, read by every layer's backend (vLLM v1 conventions).
/// Query token i of sequence s sits at absolute position seq_lens[s] - query_len(s) + i
/// (bottom-right causal alignment), so prefill, chunked prefill and decode share one layout.
#include <cstdint>
#include <string>
#include <vector>

namespace attn {

/// What the scheduler knows about one sequence this step.
struct SequenceSpec {
  int64_t context_len = 0;          // tokens already in the cache before this step
  int64_t query_len = 0;            // new tokens this step (1 for decode)
  std::vector<int32_t> block_ids;   // the sequence's blocks, in order; must cover context+query
  /// Multimodal prefix [mm_start, mm_end) (positions): its tokens attend each other in both
  /// directions on use_mm_prefix layers. Empty (start == end) = none.
  int64_t mm_start = 0, mm_end = 0;
};

struct BatchMetadata {
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;                 // sum of query lengths
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;         // row length of block_table
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  bool causal = true;
  std::vector<int32_t> query_start_loc;   // [num_seqs + 1], prefix sums of query lengths
  std::vector<int32_t> seq_lens;          // [num_seqs], context + new tokens
  std::vector<int32_t> block_table;       // [num_seqs, max_blocks_per_seq], unused entries -1
  std::vector<int64_t> slot_mapping;      // [num_tokens], block_id * block_size + offset; -1 = skip
  /// [num_seqs][2] or empty: each sequence's multimodal prefix [start, end) of positions, read by
  /// use_mm_prefix layers (a query inside it sees the whole range; causal elsewhere). The range
  /// must be in the cache once any of its tokens queries (end <= seq_len).
  std::vector<int32_t> mm_prefix_ranges;

  int32_t query_len(int s) const { return query_start_loc[s + 1] - query_start_loc[s]; }
  int32_t context_len(int s) const { return seq_lens[s] - query_len(s); }
  const int32_t* blocks(int s) const { return block_table.data() + int64_t(s) * max_blocks_per_seq; }
  /// The last key position a causal query at `pos` of sequence s sees when multimodal prefix
  /// ranges apply: the range's end - 1 inside the range, else pos.
  int32_t causal_limit(int s, int32_t pos) const { return mm_causal_limit(mm_prefix_ranges.empty() ? nullptr : mm_prefix_ranges.data(), s, pos); }
  static int32_t mm_causal_limit(const int32_t* ranges, int s, int32_t pos) {
    if (!ranges) return pos;
    const int32_t lo = ranges[2 * s], hi = ranges[2 * s + 1];
    return pos >= lo && pos < hi ? hi - 1 : pos;
  }

  /// Builds metadata from per-sequence specs; validates every length and block id against a
  /// cache of `num_blocks` blocks of `block_size` tokens.
  static BatchMetadata build(const std::vector<SequenceSpec>& seqs, int32_t block_size, int32_t num_blocks,
                             bool causal = true);

  /// Re-validates metadata assembled by hand (query_start_loc monotone and consistent,
  /// lengths non-negative, block ids in range, tables long enough, slots in range and distinct).
  void validate(int32_t num_blocks, int32_t block_size) const;
  std::string to_string() const;
};

struct LayerConfig;
/// The step's mask must be the layer's: causal for decoder layers, bidirectional for encoder /
/// encoder-only layers and use_non_causal (LayerConfig::causal()). Metadata built for the other
/// kind would apply the wrong mask without a word, so it is an attn::Error naming metadata.causal.
void check_causal(const LayerConfig& layer, const BatchMetadata& md);
/// Every slot is -1 (skip) or in [0, num_slots), and no two tokens write one slot.
void check_slot_mapping(const std::vector<int64_t>& slot_mapping, int64_t num_slots);

}  // namespace attn
