#include <algorithm>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/kv_cache.hpp"

namespace attn {

BlockAllocator::BlockAllocator(int32_t num_blocks) {
  check_num_blocks("num_blocks", num_blocks);
  refs_.assign(std::size_t(num_blocks), 0);
  free_.reserve(std::size_t(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // pop_back hands out 0, 1, 2, ...
}

void BlockAllocator::check_id(int32_t block, const char* arg) const {
  require(block >= 0 && block < num_blocks(), arg, block, "a block id in [0, " + std::to_string(num_blocks()) + ")");
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) throw Error("BlockAllocator: out of KV-cache blocks (all " + std::to_string(num_blocks()) + " in use)");
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[std::size_t(b)] = 1;
  return b;
}

void BlockAllocator::retain(int32_t block) {
  check_id(block, "block");
  require(refs_[std::size_t(block)] > 0, "block", block, "an allocated block (it is free)");
  ++refs_[std::size_t(block)];
}

void BlockAllocator::release(int32_t block) {
  check_id(block, "block");
  require(refs_[std::size_t(block)] > 0, "block", block, "an allocated block (double free)");
  if (--refs_[std::size_t(block)] == 0) free_.push_back(block);
}

int32_t BlockAllocator::ref_count(int32_t block) const {
  check_id(block, "block");
  return refs_[std::size_t(block)];
}

int32_t BlockAllocator::num_free() const { return int32_t(free_.size()); }

SequenceBlocks::~SequenceBlocks() {
  if (alloc_)
    for (int32_t b : blocks_) alloc_->release(b);
}

SequenceBlocks::SequenceBlocks(SequenceBlocks&& o) noexcept
    : alloc_(o.alloc_), block_size_(o.block_size_), tokens_(o.tokens_), blocks_(std::move(o.blocks_)) {
  o.alloc_ = nullptr;
  o.blocks_.clear();
}

void SequenceBlocks::append(int64_t n, KVCache* cache) {
  require(n >= 0, "n", n, ">= 0");
  if (n == 0) return;
  const int64_t total = checked_sum("tokens + n", {tokens_, n}, limits::kMaxSeqLen, "tokens of one sequence");
  // Copy-on-write: appending into a partly filled block that another sequence shares.
  if (tokens_ % block_size_ != 0 && !blocks_.empty() && alloc_->ref_count(blocks_.back()) > 1) {
    const int32_t fresh = alloc_->allocate();
    if (cache) cache->copy_block(blocks_.back(), fresh);
    alloc_->release(blocks_.back());
    blocks_.back() = fresh;
  }
  const int64_t need = (total + block_size_ - 1) / block_size_;
  while (int64_t(blocks_.size()) < need) blocks_.push_back(alloc_->allocate());
  tokens_ = total;
}

SequenceBlocks SequenceBlocks::fork() const {
  SequenceBlocks s(*alloc_, block_size_);
  for (int32_t b : blocks_) alloc_->retain(b);
  s.blocks_ = blocks_;
  s.tokens_ = tokens_;
  return s;
}

}  // namespace attn
