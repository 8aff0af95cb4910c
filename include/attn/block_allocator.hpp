#pragma once
/// The block pool of a paged KV cache and one sequence's block list over it (prefix sharing,
/// copy-on-write on append).
#include <cstdint>
#include <vector>

namespace attn {

class KVCache;

/// Reference-counted block allocator: shared prefixes hold one block in several tables.
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);
  int32_t allocate();                 // throws attn::Error when the pool is exhausted
  void retain(int32_t block);         // one more owner
  void release(int32_t block);        // one fewer owner; back to the pool at zero
  int32_t ref_count(int32_t block) const;
  int32_t num_free() const;
  int32_t num_blocks() const { return int32_t(refs_.size()); }

 private:
  void check_id(int32_t block, const char* arg) const;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
};

/// One sequence's block list with copy-on-write on append.
class SequenceBlocks {
 public:
  SequenceBlocks(BlockAllocator& alloc, int32_t block_size) : alloc_(&alloc), block_size_(block_size) {}
  ~SequenceBlocks();
  SequenceBlocks(SequenceBlocks&&) noexcept;
  SequenceBlocks(const SequenceBlocks&) = delete;

  /// Reserves room for `n` more tokens. If the last block is shared, it is copied first
  /// (through `cache`, if given) so the append never writes into another sequence's block.
  void append(int64_t n, KVCache* cache = nullptr);
  /// A new sequence sharing every block of this one (prefix sharing).
  SequenceBlocks fork() const;
  int64_t num_tokens() const { return tokens_; }
  const std::vector<int32_t>& block_ids() const { return blocks_; }

 private:
  BlockAllocator* alloc_;
  int32_t block_size_;
  int64_t tokens_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace attn
