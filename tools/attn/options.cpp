#include "options.hpp"

#include "attn/checked.hpp"
#include "attn/limits.hpp"

namespace attn_cli {

int32_t check_threads_option(int64_t threads) { return attn::check_threads("--threads", threads); }

RunShape check_run_options(const RunOptions& o) {
  using attn::limits::kMaxSeqLen;
  using attn::limits::kMaxTokens;
  RunShape s;
  s.batch = attn::check_range32("--batch", o.batch, 1, kMaxTokens, "sequences");
  s.prompt_len = attn::check_range32("--prompt-len", o.prompt_len, 1, kMaxSeqLen, "tokens per sequence");
  s.decode_steps = attn::check_range32("--decode-steps", o.decode_steps, 0, kMaxSeqLen, "tokens per sequence");
  s.threads = check_threads_option(o.threads);
  s.tokens_per_seq = int32_t(attn::checked_sum("--prompt-len + --decode-steps", {o.prompt_len, o.decode_steps}, kMaxSeqLen,
                                               "tokens of one sequence"));
  // The prefill step carries every prompt token of the batch at once.
  attn::checked_product("--batch * --prompt-len", {o.batch, o.prompt_len}, kMaxTokens, "tokens of one step");
  return s;
}

int32_t blocks_per_layer(const RunShape& shape, int64_t tokens, int32_t block_size) {
  const int64_t per_seq = (tokens + block_size - 1) / block_size;
  return int32_t(attn::checked_product("--batch * blocks per sequence (block size " + std::to_string(block_size) + ")",
                                       {shape.batch, per_seq}, attn::limits::kMaxNumBlocks,
                                       "blocks of one layer's cache; lower --batch, --prompt-len or --decode-steps"));
}

}  // namespace attn_cli
