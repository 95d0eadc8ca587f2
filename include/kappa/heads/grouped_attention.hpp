// kappa/heads/grouped_attention.hpp - the attention step of multi-head,
// grouped-query and multi-query attention, on already projected Q, K, V.
//
// With Q = [Q_1 ... Q_H] (N_Q x H d_head), K = [K_1 ... K_Hkv] (N_KV x H_kv
// d_head), V = [V_1 ... V_Hkv] (N_KV x H_kv d_v) and G = H / H_kv:
//
//     Y_h = Z_h^-1 A_h V_g,   A_h = f_kappa(s Q_h K_g^T) masked,   g = h / G
//     Y   = [Y_1 ... Y_H]                                 (N_Q x H d_v)
//
// For each kv head g the G query heads g G .. g G + G - 1 are attended in one
// call: their queries are stacked as the rows of one (N_Q G x d_head) matrix
// (row i G + j = query i of head g G + j; for N_Q = 1 this is a view of Q's
// row, no copy) and GroupedRows maps the mask's rows back. K_g and V_g are
// read once per group: never repeated in memory, and a decode step streams
// the cache once, not G times.
//
// MultiHeadAttention calls this after its projections; the free functions
// below serve callers that project themselves (and the benchmarks).
#pragma once

#include <algorithm>
#include <concepts>
#include <type_traits>
#include <utility>
#include <vector>

#include "kappa/attention/attention.hpp"
#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/masks.hpp"
#include "kappa/attention/whole_attention.hpp"
#include "kappa/cache/decode.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/heads/grouping.hpp"

namespace kappa {

namespace detail {

/// Scratch memory of one thread.
template <class T>
struct HeadsScratch {
  AttentionWorkspace<T> ws;
  RowMatrix<T> qg, yg;
};

/// Calls attend(q_g, y_g) with the G query heads of kv head g stacked as
/// rows, row i G + j of q_g (n G x d_head) being query i of head g G + j,
/// then writes y_g (n G x d_v) back to those heads' columns of y. One query:
/// its G heads are G contiguous rows of d_head already, so q_g and y_g are
/// views (no copy); else they are copies in qg and yg.
template <class T, class A>
void stacked_group(const ConstMatrixRef<T>& q, MatrixRef<T>& y, Index g, Index grp, Index dh,
                   Index dv, RowMatrix<T>& qg, RowMatrix<T>& yg, A&& attend) {
  const Index n = q.rows();
  if (n == 1) {
    const Eigen::Map<const RowMatrix<T>> qm(q.data() + g * grp * dh, grp, dh);
    Eigen::Map<RowMatrix<T>> ym(y.data() + g * grp * dv, grp, dv);
    attend(ConstMatrixRef<T>(qm), MatrixRef<T>(ym));
    return;
  }
  qg.resize(n * grp, dh);
  yg.resize(n * grp, dv);
  for (Index i = 0; i < n; ++i)
    qg.middleRows(i * grp, grp) =
        Eigen::Map<const RowMatrix<T>>(q.data() + i * q.outerStride() + g * grp * dh, grp, dh);
  attend(ConstMatrixRef<T>(qg), MatrixRef<T>(yg));
  for (Index i = 0; i < n; ++i)
    Eigen::Map<RowMatrix<T>>(y.data() + i * y.outerStride() + g * grp * dv, grp, dv) =
        yg.middleRows(i * grp, grp);
}

/// Attends the G query heads of kv head g for one sequence. q: the
/// sequence's (n_q x H d_head) rows of Q; kg (n_kv x d_head), vg (n_kv x d_v);
/// y: the sequence's (n_q x H d_v) rows of [Y_1 ... Y_H].
template <class T, class K, class M>
void attend_group(const ConstMatrixRef<T>& q, Index g, const ConstMatrixRef<T>& kg,
                  const ConstMatrixRef<T>& vg, MatrixRef<T> y, Index grp, const K& kernel,
                  const M& mask, HeadsScratch<T>& s) {
  const Index dh = kg.cols(), dv = vg.cols();
  if constexpr (PerHeadMask<M>) {
    // Head h = g G + j gets its own bias (mask.head(h)): heads one by one.
    for (Index h = g * grp; h < (g + 1) * grp; ++h) {
      attention_into<T>(q.middleCols(h * dh, dh), kg, vg, y.middleCols(h * dv, dv), s.ws, kernel,
                        mask.head(h));
    }
  } else {
    if (grp == 1) {
      attention_into<T>(q.middleCols(g * dh, dh), kg, vg, y.middleCols(g * dv, dv), s.ws, kernel,
                        mask);
      return;
    }
    const GroupedRows<M> grouped{&mask, grp};
    stacked_group<T>(q, y, g, grp, dh, dv, s.qg, s.yg,
                     [&](const ConstMatrixRef<T>& qg, const MatrixRef<T>& yg) {
                       attention_into<T>(qg, kg, vg, yg, s.ws, kernel, grouped);
                     });
  }
}

/// attend_group for a whole-attention approximation (whole_attention.hpp):
/// the G query heads of kv head g one by one, each Y_h = p.attend(Q_h, K_g,
/// V_g) (validated before, by grouped_attention_tasks).
template <class T, class P, class M>
void attend_group_approx(const ConstMatrixRef<T>& q, Index g, const ConstMatrixRef<T>& kg,
                         const ConstMatrixRef<T>& vg, MatrixRef<T> y, Index grp, const P& p,
                         const M& mask) {
  const Index dh = kg.cols(), dv = vg.cols();
  for (Index j = 0; j < grp; ++j) {
    const Index h = g * grp + j;
    p.template attend<T>(q.middleCols(h * dh, dh), kg, vg, y.middleCols(h * dv, dv), mask);
  }
}

/// The policies the multi-head entry points accept: a kernel f_kappa with a
/// mask or a per-head mask/bias (check_head_policies), or an attention
/// approximation (AttentionApproximation) with a plain mask.
template <class K, class M>
consteval bool check_grouped_policies() {
  if constexpr (AttentionApproximation<K>) {
    return check_mask<M>();
  } else {
    return check_head_policies<K, M>();
  }
}

/// Throws unless `mask` binds to (n_q, n_kv); a per-head policy must have
/// n_heads heads, and each of them must bind.
template <class M>
void check_heads_mask(const M& mask, Index n_heads, Index n_q, Index n_kv) {
  if constexpr (PerHeadMask<M>) {
    if (mask.heads() != n_heads) {
      throw ShapeError("kappa: multi-head attention: the per-head mask or bias has " +
                       std::to_string(mask.heads()) +
                       " heads but the layer has n_heads = " + std::to_string(n_heads));
    }
    for (Index h = 0; h < n_heads; ++h) (void)mask.head(h).bind(n_q, n_kv);
  } else {
    (void)mask.bind(n_q, n_kv);
  }
}

/// Runs every (sequence b, kv head g) task: sequence b is rows
/// q_off[b] .. q_off[b+1] - 1 of q and y; kv(b, g) returns its (K_g, V_g) as
/// a pair of ConstMatrixRef. Tasks are independent and each is computed by one
/// thread in a fixed order; with OpenMP and several tasks they are spread over
/// kappa::num_threads() threads, otherwise attention_into may split rows.
template <class T, class KV, class K, class M>
void grouped_attention_tasks(const ConstMatrixRef<T>& q, const std::vector<Index>& q_off,
                             const KV& kv, MatrixRef<T> y, Index n_heads, Index n_kv_heads,
                             const K& kernel, const M& mask) {
  const Index n_seq = static_cast<Index>(q_off.size()) - 1;
  const Index grp = n_heads / n_kv_heads;
  const Index tasks = n_seq * n_kv_heads;
  const Index* const off = q_off.data();  // indexed by Index b, as the sequences are
  // Validate the mask for every sequence up front: nothing may throw inside
  // the parallel region.
  for (Index b = 0; b < n_seq; ++b) {
    check_heads_mask(mask, n_heads, off[b + 1] - off[b], kv(b, 0).first.rows());
    if constexpr (AttentionApproximation<K> && !PerHeadMask<M>)
      kernel.validate(off[b + 1] - off[b], kv(b, 0).first.rows(), mask);
  }
  const auto task = [&](Index t, HeadsScratch<T>& s) {
    const Index b = t / n_kv_heads, g = t % n_kv_heads;
    const Index r0 = off[b], n = off[b + 1] - off[b];
    const auto kvg = kv(b, g);
    if constexpr (AttentionApproximation<K>) {
      attend_group_approx<T>(ConstMatrixRef<T>(q.middleRows(r0, n)), g, kvg.first, kvg.second,
                             MatrixRef<T>(y.middleRows(r0, n)), grp, kernel, mask);
    } else {
      attend_group<T>(ConstMatrixRef<T>(q.middleRows(r0, n)), g, kvg.first, kvg.second,
                      MatrixRef<T>(y.middleRows(r0, n)), grp, kernel, mask, s);
    }
  };
#ifdef _OPENMP
  const int threads = static_cast<int>(std::min<Index>(num_threads(), tasks));
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      HeadsScratch<T> s;
#pragma omp for schedule(dynamic, 1)
      for (Index t = 0; t < tasks; ++t) task(t, s);
    }
    return;
  }
#endif
  HeadsScratch<T> s;
  for (Index t = 0; t < tasks; ++t) task(t, s);
}

/// Whether the decode kernel's register loops take mask M: key ranges
/// without holes (per head for a PerHeadMask). A mask with holes decodes a
/// stored-format cache through the kernel's portable path, and a float cache
/// through attention_into.
template <class M>
constexpr bool decodable_mask() {
  if constexpr (PerHeadMask<M>) {
    using H = std::remove_cvref_t<decltype(std::declval<const M&>().head(Index{0}))>;
    return !decltype(std::declval<const H&>().bind(Index{0}, Index{0}))::kHasHoles;
  } else {
    return !decltype(std::declval<const M&>().bind(Index{0}, Index{0}))::kHasHoles;
  }
}

/// Whether query rows over a float (Native) cache may go through the decode
/// kernel: when its register loops are compiled in, for a score kernel and a
/// mask of key ranges. The callers take it for at most kDecodeRows rows per
/// kv head (more rows, a chunk of a prompt, run faster as a tiled prefill).
/// The loops read the cache at 0.8-0.98 of a plain read, where Eigen's
/// products on the attention_into path reach about 0.7
/// (benchmarks/README.md, "Decoding against the read ceiling").
template <class T, class K, class M>
constexpr bool native_cache_decodable() {
  if constexpr (KAPPA_DECODE_SIMD && std::same_as<T, float> && ScoreKernel<K>) {
    return decodable_mask<M>();
  } else {
    return false;
  }
}

/// The G query heads of one kv head stacked as rows (row r: query r / G of
/// the group's head r % G), each row with its own head's mask from a
/// per-head policy (ALiBi slopes, T5 buckets, a bias per head): one decode
/// kernel call then reads the group's K and V once, not once per head.
/// `heads` holds the group's head masks (their bounds may point into them).
template <class M>
struct StackedHeadMasks {
  using Head = std::remove_cvref_t<decltype(std::declval<const M&>().head(Index{0}))>;
  using HeadBound = decltype(std::declval<const Head&>().bind(Index{0}, Index{0}));
  std::vector<Head> heads;

  struct Bound {
    static constexpr bool kHasHoles = HeadBound::kHasHoles;
    static constexpr bool kHasBias = BiasedBound<HeadBound>;
    std::vector<HeadBound> b;  // head j's bound to (n, N_KV)
    [[nodiscard]] KeyRange range(Index r) const { return at(r).range(r / group()); }
    [[nodiscard]] bool allowed(Index r, Index j) const requires kHasHoles {
      return at(r).allowed(r / group(), j);
    }
    template <class T>
    void add_bias(Index r, Index j0, T* scores, Index len) const requires kHasBias {
      at(r).add_bias(r / group(), j0, scores, len);
    }

   private:
    [[nodiscard]] Index group() const { return static_cast<Index>(b.size()); }
    [[nodiscard]] const HeadBound& at(Index r) const {
      return b[static_cast<std::size_t>(r % group())];
    }
  };
  /// n_rows = n G stacked rows over n_kv keys: each head bound to (n, n_kv).
  [[nodiscard]] Bound bind(Index n_rows, Index n_kv) const {
    Bound out;
    const auto g = static_cast<Index>(heads.size());
    out.b.reserve(heads.size());
    for (const Head& h : heads) out.b.push_back(h.bind(n_rows / g, n_kv));
    return out;
  }
};

/// [Y_1 ... Y_H] for the n queries q (n x H d_head) over everything `cache`
/// stores, through the decode kernel, into y (n x H d_v): the G query heads
/// of kv head g are stacked as the rows of one call (K_g and V_g are read
/// once), with a per-head mask (ALiBi, T5) too, through StackedHeadMasks. A
/// short cache (one chunk) spreads the kv heads over the threads instead of
/// the chunks. `mask` is bound to (n, stored()).
template <Scalar T, cache::RetentionPolicy R, cache::StorageFormat F, class K, class M>
void decode_cache_heads(ConstMatrixRef<T> q, const KVCache<T, R, F>& cache, MatrixRef<T> y,
                        Index n_heads, const K& kernel, const M& mask) {
  static_assert(ScoreKernel<K>, "kappa: the decode kernel needs a score kernel");
  const KVCacheConfig& c = cache.config();
  const Index n = q.rows(), h_kv = c.n_kv_heads, grp = n_heads / h_kv;
  const Index dh = c.d_head, dv = c.value_width();
  check_heads_mask(mask, n_heads, n, cache.stored());  // before threads
  const auto head = [&](Index g, DecodeWorkspace<T>& ws, RowMatrix<T>& qg, RowMatrix<T>& yg) {
    if constexpr (PerHeadMask<M>) {
      // A bias per head (ALiBi, T5): the group's rows stacked all the same,
      // each row with its own head's mask and bias, as when the head ran
      // alone.
      StackedHeadMasks<M> stacked;
      stacked.heads.reserve(static_cast<std::size_t>(grp));
      for (Index h = g * grp; h < (g + 1) * grp; ++h) stacked.heads.push_back(mask.head(h));
      stacked_group<T>(q, y, g, grp, dh, dv, qg, yg,
                       [&](const ConstMatrixRef<T>& qs, const MatrixRef<T>& ys) {
                         decode_attention_into<T, F>(qs, cache.key_rows(g), cache.value_rows(g), ys,
                                                     ws, kernel, stacked, 1);
                       });
    } else {
      stacked_group<T>(q, y, g, grp, dh, dv, qg, yg,
                       [&](const ConstMatrixRef<T>& qs, const MatrixRef<T>& ys) {
                         decode_attention_into<T, F>(qs, cache.key_rows(g), cache.value_rows(g), ys,
                                                     ws, kernel, mask, grp);
                       });
    }
  };
#ifdef _OPENMP
  const int threads = static_cast<int>(std::min<Index>(num_threads(), h_kv));
  if (threads > 1 && cache.stored() <= kDecodeChunk) {
#pragma omp parallel num_threads(threads)
    {
      DecodeWorkspace<T> ws;
      RowMatrix<T> qg, yg;
#pragma omp for schedule(dynamic, 1)
      for (Index g = 0; g < h_kv; ++g) head(g, ws, qg, yg);
    }
    return;
  }
#endif
  DecodeWorkspace<T> ws;
  RowMatrix<T> qg, yg;
  for (Index g = 0; g < h_kv; ++g) head(g, ws, qg, yg);
}

}  // namespace detail

/// [Y_1 ... Y_H] for one sequence from stacked, already projected Q (N_Q x
/// H d_head), K (N_KV x H_kv d_head), V (N_KV x H_kv d_v), written into y
/// (N_Q x H d_v, preallocated); query head h uses kv head h / (H / H_kv);
/// `mask` is bound to (N_Q, N_KV) for every head.
/// \throws ShapeError when the shapes do not fit; std::invalid_argument when
///         n_kv_heads does not divide n_heads.
template <Scalar T, class K = kernels::Softmax, class M = NoMask>
void grouped_attention_into(ConstMatrixRef<T> q, ConstMatrixRef<T> k, ConstMatrixRef<T> v,
                            MatrixRef<T> y, Index n_heads, Index n_kv_heads, const K& kernel = {},
                            const M& mask = {}) {
  static_assert(detail::check_grouped_policies<K, M>());
  constexpr const char* what = "grouped_attention_into";
  (void)GroupedQuery::kv_heads(n_heads, n_kv_heads);
  const Index dh = q.cols() / n_heads, dv = v.cols() / n_kv_heads;
  require_shapes(q.cols() == n_heads * dh && k.cols() == n_kv_heads * dh, what, "Q", q, "K", k,
                 "Q is N_Q x (n_heads d_head), K is N_KV x (n_kv_heads d_head)");
  require_shapes(v.rows() == k.rows() && v.cols() == n_kv_heads * dv, what, "K", k, "V", v,
                 "V is N_KV x (n_kv_heads d_v)");
  require_shapes(y.rows() == q.rows() && y.cols() == n_heads * dv, what, "Y", y.rows(), y.cols(),
                 "the expected shape", q.rows(), n_heads * dv, "Y is N_Q x (n_heads d_v)");
  const std::vector<Index> q_off{0, q.rows()};
  const auto kv = [&](Index /*b*/, Index g) {
    return std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>(k.middleCols(g * dh, dh),
                                                           v.middleCols(g * dv, dv));
  };
  detail::grouped_attention_tasks<T>(q, q_off, kv, y, n_heads, n_kv_heads, kernel, mask);
}

/// The attention part of a decode step: [Y_1 ... Y_H] for n already projected
/// (and position-encoded) queries q (n x H d_head) against every row the
/// cache stores, into y (n x H d_v). `mask` is bound to (n, stored()); the
/// default CausalMask's offset stored() - n makes the queries the last n
/// positions, which is right when they were appended last. For a
/// SlidingWindow cache the rows are in ring order: use n = 1 with NoMask
/// (MultiHeadAttention::forward_cached handles every case). Float with the
/// decode kernel's register loops compiled in (AVX-512 or AVX2 + FMA), up to
/// kDecodeRows rows per kv head go through decode_attention_into, more
/// through attention_into.
/// \throws ShapeError when the shapes do not fit the cache.
template <Scalar T, cache::RetentionPolicy R, class K = kernels::Softmax, class M = CausalMask>
void grouped_attention_into(ConstMatrixRef<T> q, const KVCache<T, R>& cache, MatrixRef<T> y,
                            Index n_heads, const K& kernel = {}, const M& mask = {}) {
  static_assert(!AttentionApproximation<K>,
                "kappa: attention approximations (approx::Nystrom, SequenceSketch, "
                "SampledAttention) do not decode through a KV cache: attend to the whole "
                "sequence with grouped_attention_into(q, k, v, ...) instead");
  static_assert(detail::check_grouped_policies<K, M>());
  constexpr const char* what = "grouped_attention_into (cache)";
  const KVCacheConfig& c = cache.config();
  (void)GroupedQuery::kv_heads(n_heads, c.n_kv_heads);
  const Index qk = checked_mul("grouped_attention_into: n_heads x d_head", n_heads, c.d_head);
  const Index hv = checked_mul("grouped_attention_into: n_heads x d_v", n_heads, c.value_width());
  require_shapes(q.cols() == qk, what, "Q", q.rows(), q.cols(), "the expected shape", q.rows(), qk,
                 "Q is n x (n_heads d_head)");
  require_shapes(y.rows() == q.rows() && y.cols() == hv, what, "Y", y.rows(), y.cols(),
                 "the expected shape", q.rows(), hv, "Y is n x (n_heads d_v)");
  if constexpr (detail::native_cache_decodable<T, K, M>()) {
    if (q.rows() * (n_heads / c.n_kv_heads) <= kDecodeRows) {
      detail::decode_cache_heads<T>(q, cache, y, n_heads, kernel, mask);
      return;
    }
  }
  const std::vector<Index> q_off{0, q.rows()};
  const auto kv = [&cache](Index /*b*/, Index g) {
    return std::pair<ConstMatrixRef<T>, ConstMatrixRef<T>>(cache.keys(g), cache.values(g));
  };
  detail::grouped_attention_tasks<T>(q, q_off, kv, y, n_heads, c.n_kv_heads, kernel, mask);
}

}  // namespace kappa
