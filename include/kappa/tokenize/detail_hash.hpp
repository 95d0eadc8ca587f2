// kappa/tokenize/detail_hash.hpp - the two open-addressing hash tables behind
// byte-level BPE: token bytes -> id, and (left id, right id) -> merge.
// Internal (namespace detail); kept apart so that bpe.hpp reads as the
// algorithm.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kappa::tokenize::detail {

/// A fast 64-bit hash of a short byte string (8 bytes per step).
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

/// Byte strings -> 32-bit values. Keys are stored once, in an arena.
class StringMap {
 public:
  static constexpr std::uint32_t kMissing = 0xFFFFFFFFu;

  std::size_t size() const noexcept { return count_; }

  /// Inserts key -> value; returns false (and changes nothing) if present.
  bool insert(std::string_view key, std::uint32_t value) {
    if ((count_ + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t h = hash_bytes(key.data(), key.size());
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value == kMissing) {
        s = {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(arena_.size()),
             static_cast<std::uint32_t>(key.size()), value};
        arena_.append(key);
        ++count_;
        return true;
      }
      if (s.hash == static_cast<std::uint32_t>(h) && key_of(s) == key) return false;
    }
  }

  /// The value of key, or kMissing.
  std::uint32_t find(std::string_view key) const noexcept {
    if (count_ == 0) return kMissing;
    const std::uint64_t h = hash_bytes(key.data(), key.size());
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kMissing) return kMissing;
      if (s.hash == static_cast<std::uint32_t>(h) && s.length == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.value;
    }
  }

 private:
  struct Slot {
    std::uint32_t hash, offset, length, value = kMissing;
  };
  std::string_view key_of(const Slot& s) const { return {arena_.data() + s.offset, s.length}; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.value == kMissing) continue;
      std::size_t i =
          static_cast<std::size_t>(hash_bytes(arena_.data() + s.offset, s.length)) & mask_;
      while (slots_[i].value != kMissing) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t mask_ = 0, count_ = 0;
};

/// A merge: priority (lower merges first) and the id of the merged token.
struct Merge {
  std::uint32_t priority = 0xFFFFFFFFu;
  std::uint32_t result = 0xFFFFFFFFu;
};

/// (left id, right id) -> Merge.
class PairMap {
 public:
  std::size_t size() const noexcept { return count_; }

  bool insert(std::uint32_t left, std::uint32_t right, Merge m) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    const std::uint64_t key = pack(left, right);
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) {
        s = {key, m};
        ++count_;
        return true;
      }
      if (s.key == key) return false;
    }
  }

  /// The merge of (left, right); priority 0xFFFFFFFF if there is none.
  Merge find(std::uint32_t left, std::uint32_t right) const noexcept {
    if (count_ == 0) return {};
    const std::uint64_t key = pack(left, right);
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {};
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge;
  };
  static std::uint64_t pack(std::uint32_t l, std::uint32_t r) noexcept {
    return (std::uint64_t{l} << 32) | r;
  }
  std::size_t slot_of(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    shift_ = 64 - std::countr_zero(slots_.size());
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      std::size_t i = slot_of(s.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, count_ = 0;
  int shift_ = 63;
};

/// A min-heap of 64-bit keys with 8 children per node: the 8 children of a
/// node are 64 contiguous bytes (one cache line), so a heap of a million keys
/// is 7 levels deep instead of 20, and sifting down misses the cache about
/// once per level (the merge of one long piece is memory-bound).
struct MinHeap {
  static constexpr std::size_t kArity = 8;
  std::vector<std::uint64_t> keys;

  /// Orders `keys` into a heap (linear time).
  void make() noexcept {
    if (keys.size() < 2) return;
    for (std::size_t i = (keys.size() - 2) / kArity + 1; i-- > 0;) sift_down(i, keys[i]);
  }
  void push(std::uint64_t v) {
    std::size_t i = keys.size();
    keys.push_back(v);
    while (i > 0) {
      const std::size_t parent = (i - 1) / kArity;
      if (keys[parent] <= v) break;
      keys[i] = keys[parent];
      i = parent;
    }
    keys[i] = v;
  }
  /// Removes and returns the smallest key; keys is not empty.
  std::uint64_t pop() noexcept {
    const std::uint64_t top = keys.front();
    const std::uint64_t last = keys.back();
    keys.pop_back();
    if (!keys.empty()) sift_down(0, last);
    return top;
  }

 private:
  void sift_down(std::size_t i, std::uint64_t v) noexcept {
    const std::size_t n = keys.size();
    for (;;) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      const std::size_t end = first + kArity < n ? first + kArity : n;
      std::size_t m = first;
      for (std::size_t c = first + 1; c < end; ++c)
        if (keys[c] < keys[m]) m = c;
      if (keys[m] >= v) break;
      keys[i] = keys[m];
      i = m;
    }
    keys[i] = v;
  }
};

}  // namespace kappa::tokenize::detail
