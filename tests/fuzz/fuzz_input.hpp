#pragma once
// Turns a fuzzer's byte string into the few small values a harness needs. Reading past the end
// yields zeros, so every byte string is a valid input and short inputs mean small cases.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace attn::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t remaining() const { return size_ - pos_; }
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return byte() & 1; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | byte();
    return v;
  }
  uint64_t u64() { return (uint64_t(u32()) << 32) | u32(); }
  /// Any int64, negative and extreme values included (bit-cast, no overflow).
  int64_t i64() {
    const uint64_t u = u64();
    int64_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  /// Any int32, negative and extreme values included.
  int32_t i32() {
    const uint32_t u = u32();
    int32_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  /// A value in lo..hi (inclusive), from one byte.
  int small(int lo, int hi) { return lo + int(byte() % unsigned(hi - lo + 1)); }
  /// One of `n` choices.
  int pick(int n) { return int(byte() % unsigned(n)); }
  /// A string of up to `max` bytes, length-prefixed by one byte.
  std::string string(std::size_t max) {
    std::size_t n = std::size_t(byte()) % (max + 1);
    if (n > remaining()) n = remaining();
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace attn::fuzz
