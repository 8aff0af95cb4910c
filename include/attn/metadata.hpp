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

  int32_t query_len(int s) const { return query_start_loc[s + 1] - query_start_loc[s]; }
  int32_t context_len(int s) const { return seq_lens[s] - query_len(s); }
  const int32_t* blocks(int s) const { return block_table.data() + int64_t(s) * max_blocks_per_seq; }

  /// Builds metadata from per-sequence specs; validates every length and block id against a
  /// cache of `num_blocks` blocks of `block_size` tokens.
  static BatchMetadata build(const std::vector<SequenceSpec>& seqs, int32_t block_size, int32_t num_blocks,
                             bool causal = true);

  /// Re-validates metadata assembled by hand (query_start_loc monotone and consistent,
  /// lengths non-negative, block ids in range, tables long enough, slots in range).
  void validate(int32_t num_blocks, int32_t block_size) const;
  std::string to_string() const;
};

struct LayerConfig;
/// The step's mask must be the layer's: causal for decoder layers, bidirectional for encoder /
/// encoder-only layers and use_non_causal (LayerConfig::causal()). Metadata built for the other
/// kind would apply the wrong mask without a word, so it is an attn::Error naming metadata.causal.
void check_causal(const LayerConfig& layer, const BatchMetadata& md);

}  // namespace attn
