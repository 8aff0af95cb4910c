#pragma once
// The numbers a user types, checked against attn's limits (include/attn/limits.hpp) before they
// become sizes: every error is an attn::Error naming the option, the value and the accepted range.
#include <cstdint>

#include "commands.hpp"

namespace attn_cli {

/// `attn run`'s sizes once checked; each fits the int32 fields it ends up in.
struct RunShape {
  int32_t batch = 0, prompt_len = 0, decode_steps = 0, threads = 0;
  int32_t tokens_per_seq = 0;  // prompt_len + decode_steps
};
RunShape check_run_options(const RunOptions& options);

/// --threads of any subcommand.
int32_t check_threads_option(int64_t threads);

/// KV-cache blocks one layer needs for `batch` sequences of `tokens` tokens, checked against
/// the per-layer block limit with the options that produced it named in the error.
int32_t blocks_per_layer(const RunShape& shape, int64_t tokens, int32_t block_size);

}  // namespace attn_cli
