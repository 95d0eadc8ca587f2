// kappa/cache/kv_cache.hpp - the key/value cache of one attention layer.
//
// Decoding one token at a time, token t's query attends to the keys and
// values of tokens 0..t. Those of the past do not change, so a layer keeps
// them: per key/value head g, K_g (t x d_head) and V_g (t x d_v). This is the
// KV cache. It is a TokenStore (token_store.hpp) of 2 H_kv streams - K_0 ..
// K_{H_kv-1}, then V_0 .. V_{H_kv-1} - so growth, a fixed capacity, the
// sliding-window ring, truncate (rollback) and reset behave as described
// there, and keys(g)/values(g) are views of the preallocated storage.
//
// Memory: per token and layer the cache holds H_kv (d_head + d_v) values,
// i.e. 2 H_kv d_head sizeof(storage) bytes when d_v = d_head. Grouped-query
// attention shrinks it by H / H_kv against multi-head attention; multi-query
// attention (H_kv = 1) by H.
//
// Storage format (the third template parameter, formats.hpp): cache::Native
// stores T; cache::BF16 and cache::F16 halve a float cache's bytes,
// cache::Int8 quarters them (plus one float scale per token and kv head).
// Decoding reads the whole cache every step, so its time falls with the
// bytes. Measured error of a layer's outputs against the same layer over a
// float cache (tests/cache/cache_formats_test.cpp: 160 tokens of English
// text, GPT-2 tokenizer and token embeddings of the tiny GPT-2 checkpoint,
// decoded one token per call through a grouped-query layer of 8 heads of 64
// over 2 kv heads with seeded weights; relative Frobenius error of all
// outputs; the test asserts the bound):
//
// | format | bytes/value | measured | bound tested |
// |--------|-------------|----------|--------------|
// | BF16   | 2           | 2.1e-3   | 5e-3         |
// | F16    | 2           | 2.8e-4   | 1e-3         |
// | Int8   | 1 (+4/row)  | 7.1e-3   | 2e-2         |
//
// The latent cache of a DeepSeek-V2-shaped layer measures the same (BF16
// 1.8e-3, F16 2.6e-4, Int8 6.8e-3).
#pragma once

#include <concepts>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kappa/cache/formats.hpp"
#include "kappa/cache/token_store.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"

namespace kappa {

/// The shape of one layer's KV cache.
struct KVCacheConfig {
  Index n_kv_heads = 1;  ///< H_kv
  Index d_head = 64;     ///< d_QK per head (width of K_g)
  Index d_v = 0;         ///< width of V_g; 0 means d_head
  [[nodiscard]] Index value_width() const { return d_v > 0 ? d_v : d_head; }
};

/// One layer's KV cache: K_g and V_g for each key/value head g.
/// \tparam T  the scalar type of the layer (float or double)
/// \tparam R  retention policy: cache::Growable, cache::FixedCapacity or
///            cache::SlidingWindow (see token_store.hpp).
/// \tparam F  storage format: cache::Native (T), cache::BF16, cache::F16 or
///            cache::Int8 (see formats.hpp and the error table above).
template <Scalar T, cache::RetentionPolicy R = cache::Growable,
          cache::StorageFormat F = cache::Native>
class KVCache {
 public:
  using Retention = R;
  using Format = F;
  using Store = cache::TokenStore<T, R, F>;
  using ConstView = typename Store::ConstView;
  /// The rows of one stream in the storage format (see formats.hpp).
  using Rows = typename Store::Rows;

  /// An empty cache for the given shape. \throws std::invalid_argument for
  /// non-positive sizes (and as TokenStore for a bad retention policy);
  /// RangeError naming the value for more than kMaxHeads kv heads, or when
  /// H_kv (d_head + d_v) or the storage exceeds kMaxElements (checked.hpp).
  explicit KVCache(const KVCacheConfig& config, R retention = {})
      : config_(checked(config)), store_(widths(config_), retention) {}

  [[nodiscard]] const KVCacheConfig& config() const { return config_; }
  [[nodiscard]] Index n_kv_heads() const { return config_.n_kv_heads; }
  /// t: tokens appended so far = the position of the next token.
  [[nodiscard]] Index length() const { return store_.length(); }
  /// Rows held: t, or min(t, W) for a sliding window.
  [[nodiscard]] Index stored() const { return store_.stored(); }
  /// Position of the oldest stored token.
  [[nodiscard]] Index first_position() const { return store_.first_position(); }
  [[nodiscard]] Index capacity() const { return store_.capacity(); }
  /// Bytes of the live rows: stored() x bytes_per_token().
  [[nodiscard]] std::size_t bytes() const { return store_.bytes(); }
  /// Bytes allocated: capacity() tokens.
  [[nodiscard]] std::size_t capacity_bytes() const { return store_.capacity_bytes(); }
  /// Bytes this cache holds per token: H_kv (d_head + d_v) x the bytes of a
  /// stored value, plus 2 H_kv scales of 4 bytes for Int8.
  [[nodiscard]] std::size_t bytes_per_token() const { return store_.bytes_per_token(); }

  /// Bytes of KV cache per token for a model of `layers` layers of this
  /// shape, each scalar stored in `bytes_per_scalar` bytes (sizeof(T) unless
  /// given, e.g. 2 for a 16-bit cache): H_kv (d_head + d_v) x layers x
  /// bytes_per_scalar, which is 2 H_kv d_head layers bytes_per_scalar when
  /// d_v = d_head. The same name and shape as LatentCache::bytes_per_token;
  /// an object's bytes_per_token() is this with layers = 1, sizeof(T).
  /// \throws RangeError naming the values if a size is negative or the
  ///         product does not fit in int64.
  static std::size_t bytes_per_token(const KVCacheConfig& c, Index layers = 1,
                                     std::size_t bytes_per_scalar = sizeof(T)) {
    constexpr Index kAny = std::numeric_limits<Index>::max();
    const Index width =
        checked_add("KV cache bytes per token: d_head + d_v", c.d_head, c.value_width(), kAny);
    const Index per_layer =
        checked_mul("KV cache bytes per token: H_kv x (d_head + d_v)", c.n_kv_heads, width, kAny);
    const Index scalars = checked_mul("KV cache bytes per token: scalars per layer x layers",
                                      per_layer, layers, kAny);
    if (bytes_per_scalar > static_cast<std::size_t>(kAny))
      throw RangeError("kappa: KV cache bytes per token: bytes per scalar " +
                       std::to_string(bytes_per_scalar) + " is too large");
    return static_cast<std::size_t>(checked_mul("KV cache bytes per token: scalars x bytes",
                                                scalars, static_cast<Index>(bytes_per_scalar),
                                                kAny));
  }

  /// Bytes of KV cache per token for a model of `layers` layers of this
  /// shape stored in format F2: H_kv (d_head + d_v) layers sizeof(element),
  /// plus 2 H_kv layers 4 bytes of row scales for Int8. E.g. LLaMA-3-70B (80
  /// layers, 8 kv heads of 128): 655360 bytes in float, 327680 in BF16 or
  /// F16, 168960 in Int8. \throws RangeError as the overload above.
  template <cache::StorageFormat F2>
  static std::size_t bytes_per_token(const KVCacheConfig& c, Index layers, F2 /*format*/) {
    constexpr Index kAny = std::numeric_limits<Index>::max();
    const std::size_t values = bytes_per_token(c, layers, sizeof(typename F2::template Element<T>));
    if constexpr (!F2::kScaled) {
      return values;
    } else {
      const Index rows =
          checked_mul("KV cache bytes per token: 2 H_kv x layers",
                      checked_mul("KV cache: 2 H_kv", 2, c.n_kv_heads, kAny), layers, kAny);
      return static_cast<std::size_t>(
          checked_add("KV cache bytes per token: values + scales", static_cast<Index>(values),
                      checked_mul("KV cache: scale bytes", rows, Index{4}, kAny), kAny));
    }
  }

  /// K_g: stored() x d_head, a view into the storage (row order as in
  /// TokenStore). Native format only; the others use key_rows().
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, cache::Native>
  [[nodiscard]] ConstView keys(Index g) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    return store_.stream(g);
  }
  /// V_g: stored() x d_v, a view into the storage. Native format only.
  // (A member template, so that an explicit instantiation of the class for
  // another format does not instantiate it: clang 14 would.)
  template <class F2 = F>
  requires std::same_as<F2, cache::Native>
  [[nodiscard]] ConstView values(Index g) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    return store_.stream(config_.n_kv_heads + g);
  }
  /// K_g in the storage format (stored() x d_head), a view: what the decode
  /// kernel reads. \throws RangeError unless 0 <= g < H_kv.
  [[nodiscard]] Rows key_rows(Index g) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    return store_.stored_rows(g);
  }
  /// V_g in the storage format (stored() x d_v), a view.
  [[nodiscard]] Rows value_rows(Index g) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    return store_.stored_rows(config_.n_kv_heads + g);
  }

  /// Appends n tokens: k = [K_0 ... K_{H_kv-1}] (n x H_kv d_head) and
  /// v = [V_0 ... V_{H_kv-1}] (n x H_kv d_v), the stacked layout of
  /// MultiHeadAttention's projections.
  /// \throws ShapeError naming the expected and actual shapes; RangeError
  ///         past a FixedCapacity; std::invalid_argument for a NaN or
  ///         infinite value in an Int8 cache. On an error the cache is
  ///         unchanged.
  void append(ConstMatrixRef<T> k, ConstMatrixRef<T> v) {
    const Index h = config_.n_kv_heads, dk = config_.d_head, dv = config_.value_width();
    require_shapes(k.cols() == h * dk, "KVCache::append", "k", k.rows(), k.cols(),
                   "the expected shape", k.rows(), h * dk, "k is n x (H_kv d_head)");
    require_shapes(v.cols() == h * dv && v.rows() == k.rows(), "KVCache::append", "v", v.rows(),
                   v.cols(), "the expected shape", k.rows(), h * dv,
                   "v is n x (H_kv d_v), n as in k");
    if (k.rows() == 0) return;  // nothing to add (and no block of empty storage to take)
    std::vector<ConstMatrixRef<T>> rows;
    rows.reserve(static_cast<std::size_t>(2 * h));
    for (Index g = 0; g < h; ++g) rows.emplace_back(k.middleCols(g * dk, dk));
    for (Index g = 0; g < h; ++g) rows.emplace_back(v.middleCols(g * dv, dv));
    store_.append(rows);
  }

  /// Rolls back to the first len tokens (see TokenStore::truncate).
  void truncate(Index len) { store_.truncate(len); }
  /// Forgets every token; keeps the allocation.
  void reset() { store_.reset(); }
  /// See TokenStore::reserve.
  void reserve(Index tokens) { store_.reserve(tokens); }

  /// Copies K_g (or V_g) at positions first .. first + count - 1, in position
  /// order, into out (count x width): what a sliding-window chunk needs.
  /// \throws RangeError naming g unless 0 <= g < H_kv, naming count if it is
  ///         negative, or if a position is not stored; ShapeError unless out
  ///         is count x d_head (count x d_v). Nothing is written on an error.
  void copy_keys(Index g, Index first, Index count, MatrixRef<T> out) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    store_.copy_chronological(g, first, count, out);
  }
  void copy_values(Index g, Index first, Index count, MatrixRef<T> out) const {
    require_index("kv head", g, config_.n_kv_heads, "the cache's kv heads");
    store_.copy_chronological(config_.n_kv_heads + g, first, count, out);
  }

  /// The underlying store (for code generic over caches).
  [[nodiscard]] const Store& store() const { return store_; }

 private:
  static KVCacheConfig checked(KVCacheConfig c) {
    if (c.n_kv_heads < 1 || c.d_head < 1 || c.d_v < 0) {
      throw std::invalid_argument(
          "kappa: KVCache: n_kv_heads and d_head must be >= 1 and d_v >= 0, got " +
          std::to_string(c.n_kv_heads) + ", " + std::to_string(c.d_head) + " and " +
          std::to_string(c.d_v));
    }
    // Checked here once, so that append's H_kv d_head and H_kv d_v cannot overflow.
    require_head_count("KVCache: n_kv_heads", c.n_kv_heads);
    const Index width =
        checked_add("KVCache: d_head + d_v", c.d_head, c.value_width(), kMaxElements);
    (void)checked_mul("KVCache: scalars per token, H_kv x (d_head + d_v)", c.n_kv_heads, width);
    return c;
  }
  static std::vector<Index> widths(const KVCacheConfig& c) {
    std::vector<Index> w;
    for (Index g = 0; g < c.n_kv_heads; ++g) w.push_back(c.d_head);
    for (Index g = 0; g < c.n_kv_heads; ++g) w.push_back(c.value_width());
    return w;
  }

  KVCacheConfig config_;
  Store store_;
};

}  // namespace kappa
