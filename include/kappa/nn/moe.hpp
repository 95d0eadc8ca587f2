// kappa/nn/moe.hpp - the mixture-of-experts feed-forward (Shazeer et al.
// 2017; Mixtral, Qwen2-MoE, DeepSeek-V2/V3), a feed-forward policy beside
// Mlp and GatedMlp:
//
//   logits   = X W_r                               W_r: (d, E), one column per expert
//   s        = score(logits)                       softmax over the E experts, or sigmoid
//   I(x)     = the k experts chosen for token x    (top-k of s, or of s + b, within
//                                                   the best groups; see Selection)
//   w_e      = s_e for e in I(x), renormalised to sum 1 if asked, times a scale
//   F(x)     = sum_{e in I(x)} w_e E_e(x) + g(x) S(x)
//
// where E_e is expert e, a gated MLP (SwiGLU) of width d_ff, and S the
// optional shared expert(s), always active, with an optional gate
// g(x) = sigmoid(x w_g) (Qwen2-MoE) or g = 1 (DeepSeek).
//
// Cost: the tokens routed to one expert are gathered and go through it as
// one product (prefill is E small GEMMs, not N x k GEMVs), and a decode step
// reads only the chosen experts' weights: decode_bytes() counts the router,
// k experts and the shared ones. A single token (decoding) skips the
// gathering, and its experts are shared out among the threads whole (one
// fork-join per layer; see forward_one).
//
// Expert parallelism: a mixture may hold only the experts [e0, e0 + m) of
// its E (the router still scores all E). Tokens routed to an expert it does
// not hold get nothing from that expert here; summing the outputs of
// mixtures that hold disjoint ranges covering all E (one allreduce across
// the ranks of kappa/dist) gives F(x). The shared expert is added by every
// holder (a split of its columns keeps the sum right).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"
#include "kappa/core/weight_storage.hpp"
#include "kappa/nn/feed_forward.hpp"

namespace kappa {

/// How router logits become scores s.
enum class RouterScore {
  kSoftmax,  ///< s = softmax(logits) over all E experts (Mixtral, Qwen2-MoE, DeepSeek-V2)
  kSigmoid,  ///< s_e = sigmoid(logit_e) (DeepSeek-V3)
};

/// How the k experts of a token are chosen (ties go to the smaller index).
enum class ExpertSelection {
  /// The k largest s_e.
  kTopK,
  /// DeepSeek-V2's group-limited greedy: the E experts form n_group equal
  /// groups; a group's score is its largest s_e; the topk_group best groups
  /// stay, the others' scores become 0, and the k largest of those are chosen.
  kGroupLimitedTopK,
  /// DeepSeek-V3's noaux_tc: as kGroupLimitedTopK on s + b (b: the
  /// e_score_correction_bias), with a group's score the sum of its two
  /// largest s_e + b_e. The bias changes which experts are chosen, not their
  /// weights: w_e = s_e.
  kBiasedGroupTopK,
};

/// Whether the chosen scores are renormalised to sum 1.
enum class TopKWeights {
  kAsScored,      ///< w_e = s_e (then times scale)
  kRenormalized,  ///< w_e = s_e / (sum_{e' in I} s_e' + epsilon) (then times scale)
};

/// The router's configuration (sizes are runtime values).
struct RouterConfig {
  Index n_experts = 0;  ///< E
  Index top_k = 0;      ///< k, 1 <= k <= E
  RouterScore score = RouterScore::kSoftmax;
  ExpertSelection selection = ExpertSelection::kTopK;
  Index n_group = 1;     ///< groups of experts (divides E), for the group selections
  Index topk_group = 1;  ///< groups kept, 1 <= topk_group <= n_group
  TopKWeights weights = TopKWeights::kAsScored;
  double renorm_epsilon = 0.0;  ///< added to the sum when renormalising (DeepSeek: 1e-20)
  double scale = 1.0;           ///< multiplies every w_e (DeepSeek's routed_scaling_factor)

  /// \throws std::invalid_argument naming the value that is out of range.
  void validate() const {
    const auto bad = [](const std::string& what) {
      throw std::invalid_argument("kappa: RouterConfig: " + what);
    };
    if (n_experts < 1) bad("n_experts must be >= 1, got " + std::to_string(n_experts));
    if (top_k < 1 || top_k > n_experts)
      bad("top_k must be in [1, n_experts = " + std::to_string(n_experts) + "], got " +
          std::to_string(top_k));
    if (selection != ExpertSelection::kTopK) {
      if (n_group < 1 || n_experts % n_group != 0)
        bad("n_group = " + std::to_string(n_group) +
            " must divide n_experts = " + std::to_string(n_experts));
      if (topk_group < 1 || topk_group > n_group)
        bad("topk_group must be in [1, n_group = " + std::to_string(n_group) + "], got " +
            std::to_string(topk_group));
      if (top_k > topk_group * (n_experts / n_group))
        bad("top_k = " + std::to_string(top_k) + " exceeds the experts of the " +
            std::to_string(topk_group) + " groups kept");
      if (selection == ExpertSelection::kBiasedGroupTopK && n_experts / n_group < 2)
        bad("the biased group selection scores a group by its two best experts: groups need "
            ">= 2 experts");
    }
    if (!(renorm_epsilon >= 0) || !std::isfinite(renorm_epsilon))
      bad("renorm_epsilon must be finite and >= 0");
    if (!(scale > 0) || !std::isfinite(scale)) bad("scale must be finite and > 0");
  }
};

/// The experts chosen for each of N tokens: row i holds token i's k expert
/// indices and weights w_e (after renormalisation and scale).
struct Routing {
  std::vector<Index> experts;   ///< N x k, row-major
  std::vector<double> weights;  ///< N x k, row-major
  Index k = 0;
};

/// The router alone: logits -> chosen experts and their weights. A plain
/// loop per token over E scores; see RouterConfig.
///
/// \param c       the router's configuration
/// \param logits  X W_r (N, E)
/// \param bias    b (E) for kBiasedGroupTopK, else empty
inline Routing route(const RouterConfig& c, const Eigen::Ref<const RowMatrix<double>>& logits,
                     const std::vector<double>& bias = {}) {
  const Index n = logits.rows(), e_count = c.n_experts, k = c.top_k;
  KAPPA_ASSERT(logits.cols() == e_count);
  Routing r;
  r.k = k;
  r.experts.resize(static_cast<std::size_t>(n * k));
  r.weights.resize(static_cast<std::size_t>(n * k));
  std::vector<double> s(static_cast<std::size_t>(e_count)), choice(s.size());
  std::vector<Index> order(s.size());
  const Index group_size = c.n_group > 0 ? e_count / c.n_group : e_count;
  std::vector<double> group_score(static_cast<std::size_t>(std::max<Index>(c.n_group, 1)));
  std::vector<Index> group_order(group_score.size());
  // "a before b": larger value first, ties to the smaller index.
  const auto by_value = [](const std::vector<double>& v) {
    return [&v](Index a, Index b) {
      const double x = v[static_cast<std::size_t>(a)], y = v[static_cast<std::size_t>(b)];
      return x > y || (x == y && a < b);
    };
  };
  for (Index i = 0; i < n; ++i) {
    const auto row = logits.row(i);
    if (c.score == RouterScore::kSoftmax) {
      const double m = row.maxCoeff();
      double z = 0;
      for (Index e = 0; e < e_count; ++e) {
        s[static_cast<std::size_t>(e)] = std::exp(row(e) - m);
        z += s[static_cast<std::size_t>(e)];
      }
      for (double& x : s) x /= z;
    } else {
      for (Index e = 0; e < e_count; ++e)
        s[static_cast<std::size_t>(e)] = 1.0 / (1.0 + std::exp(-row(e)));
    }
    choice = s;
    if (c.selection == ExpertSelection::kBiasedGroupTopK)
      for (std::size_t e = 0; e < choice.size(); ++e) choice[e] += bias[e];
    if (c.selection != ExpertSelection::kTopK) {
      for (Index g = 0; g < c.n_group; ++g) {
        const auto first = choice.begin() + g * group_size;
        double score = 0;
        if (c.selection == ExpertSelection::kGroupLimitedTopK) {
          score = *std::max_element(first, first + group_size);
        } else {  // the sum of the group's two largest
          std::vector<double> top(first, first + group_size);
          std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
          score = top[0] + top[1];
        }
        group_score[static_cast<std::size_t>(g)] = score;
        group_order[static_cast<std::size_t>(g)] = g;
      }
      std::partial_sort(group_order.begin(), group_order.begin() + c.topk_group, group_order.end(),
                        by_value(group_score));
      std::vector<char> kept(group_score.size(), 0);
      for (Index j = 0; j < c.topk_group; ++j)
        kept[static_cast<std::size_t>(group_order[static_cast<std::size_t>(j)])] = 1;
      // The groups not kept: their experts' values become 0, as upstream's
      // masked_fill(~mask, 0.0) (so a kept expert with a negative s + b can
      // lose to a masked one, exactly as there).
      for (Index e = 0; e < e_count; ++e)
        if (!kept[static_cast<std::size_t>(e / group_size)])
          choice[static_cast<std::size_t>(e)] = 0;
    }
    for (Index e = 0; e < e_count; ++e) order[static_cast<std::size_t>(e)] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_value(choice));
    double sum = 0;
    for (Index j = 0; j < k; ++j)
      sum += s[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])];
    const double norm =
        c.weights == TopKWeights::kRenormalized ? 1.0 / (sum + c.renorm_epsilon) : 1.0;
    for (Index j = 0; j < k; ++j) {
      const auto at = static_cast<std::size_t>(i * k + j);
      r.experts[at] = order[static_cast<std::size_t>(j)];
      r.weights[at] =
          s[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] * norm * c.scale;
    }
  }
  return r;
}

/// The mixture-of-experts feed-forward (see the file comment).
///
/// ```cpp
/// kappa::RouterConfig rc{.n_experts = 8, .top_k = 2, .weights =
/// kappa::TopKWeights::kRenormalized}; kappa::MixtureOfExperts<float> moe(4096, 14336, rc);      //
/// Mixtral 8x7B moe.set_router(w_r);                                       // (d, E) for (Index e =
/// 0; e < 8; ++e) moe.set_expert(e, w_gate, w_up, w_down); kappa::RowMatrix<float> y =
/// moe.forward(x);                // (N, d)
/// ```
/// \tparam Storage  weight storage of the experts (DenseWeights, Bf16Weights)
template <Scalar T, WeightStoragePolicy Storage = DenseWeights>
class MixtureOfExperts {
 public:
  using value_type = T;
  using StorageType = Storage;
  using Expert = GatedMlp<T, Silu, Storage>;

  /// E experts of width d_ff with zero weights, the router W_r = 0, no
  /// shared expert. \throws std::invalid_argument for a bad router config.
  MixtureOfExperts(Index d_model, Index d_ff, RouterConfig router)
      : router_(router), w_r_(RowMatrix<T>::Zero(d_model, router.n_experts)) {
    router_.validate();
    experts_.reserve(static_cast<std::size_t>(router.n_experts));
    for (Index e = 0; e < router.n_experts; ++e) experts_.emplace_back(d_model, d_ff);
  }
  /// As above with experts already built (each (d, d_ff) as the first):
  /// all E of them, or (expert parallelism, see the file comment) the m >= 1
  /// experts [first_expert, first_expert + m) of the router's E.
  /// \throws ShapeError when the experts do not fit the router's E or differ
  ///         in shape; std::invalid_argument for a bad router config.
  MixtureOfExperts(std::vector<Expert> experts, RouterConfig router, RowMatrix<T> w_router,
                   std::optional<Index> first_expert = std::nullopt)
      : router_(router), experts_(std::move(experts)), first_(first_expert.value_or(0)) {
    router_.validate();
    const auto held = static_cast<Index>(experts_.size());
    if (!first_expert ? held != router_.n_experts
                      : (held < 1 || first_ < 0 || first_ > router_.n_experts - held))
      throw ShapeError("kappa: MixtureOfExperts: " + std::to_string(experts_.size()) + " experts" +
                       (first_expert ? " from expert " + std::to_string(first_) : std::string()) +
                       " but the router has n_experts = " + std::to_string(router_.n_experts) +
                       (first_expert ? " (a range held must lie within them)" : ""));
    for (const Expert& x : experts_)
      require_shapes(x.d_model() == experts_[0].d_model() && x.d_ff() == experts_[0].d_ff(),
                     "MixtureOfExperts", "an expert", x.d_model(), x.d_ff(), "expert 0",
                     experts_[0].d_model(), experts_[0].d_ff(), "all experts have one shape");
    w_r_ = RowMatrix<T>::Zero(experts_.empty() ? 0 : experts_[0].d_model(), router_.n_experts);
    set_router(std::move(w_router));  // checked against the experts' d_model
  }

  [[nodiscard]] Index d_model() const { return w_r_.rows(); }
  [[nodiscard]] Index n_experts() const { return router_.n_experts; }
  [[nodiscard]] Index top_k() const { return router_.top_k; }
  [[nodiscard]] Index d_ff() const { return experts_.empty() ? 0 : experts_[0].d_ff(); }
  [[nodiscard]] const RouterConfig& router() const { return router_; }
  [[nodiscard]] const RowMatrix<T>& w_router() const { return w_r_; }
  /// The experts held: [first_expert(), first_expert() + n_held()) of the
  /// n_experts() (all of them unless built for expert parallelism).
  [[nodiscard]] Index first_expert() const { return first_; }
  [[nodiscard]] Index n_held() const { return static_cast<Index>(experts_.size()); }
  [[nodiscard]] bool holds(Index e) const { return e >= first_ && e < first_ + n_held(); }
  /// Expert e (of the n_experts()). \throws RangeError unless held.
  [[nodiscard]] const Expert& expert(Index e) const {
    require_held(e);
    return experts_[static_cast<std::size_t>(e - first_)];
  }
  [[nodiscard]] const std::optional<Expert>& shared() const { return shared_; }

  /// W_r (d, E): the router's logits are X W_r (Hugging Face's gate.weight
  /// is its transpose). \throws ShapeError naming both shapes.
  void set_router(RowMatrix<T> w_r) {
    require_shapes(w_r.rows() == d_model() && w_r.cols() == n_experts(),
                   "MixtureOfExperts::set_router", "W_r", w_r.rows(), w_r.cols(), "expected",
                   d_model(), n_experts(), "W_r is (d_model, n_experts)");
    w_r_ = std::move(w_r);
  }
  /// b (E): the correction bias of kBiasedGroupTopK. \throws ShapeError.
  void set_selection_bias(const RowVector<T>& b) {
    require_shapes(b.size() == n_experts(), "MixtureOfExperts::set_selection_bias", "b", 1,
                   b.size(), "expected", 1, n_experts(), "one bias per expert");
    bias_.assign(b.data(), b.data() + b.size());
  }
  /// Expert e's W_gate, W_up (d, d_ff) and W_down (d_ff, d).
  void set_expert(Index e, const ConstMatrixRef<T>& w_gate, const ConstMatrixRef<T>& w_up,
                  RowMatrix<T> w_down) {
    require_held(e);
    experts_[static_cast<std::size_t>(e - first_)].set_weights(w_gate, w_up, std::move(w_down));
  }
  /// The shared expert(s) S (one gated MLP; DeepSeek's n_shared_experts are
  /// one MLP of n_shared x the width), and the optional gate w_g (d): the
  /// shared output is multiplied by sigmoid(x w_g) (Qwen2-MoE); empty: 1.
  void set_shared(Expert shared, RowVector<T> gate = {}) {
    require_shapes(shared.d_model() == d_model(), "MixtureOfExperts::set_shared", "S", 1,
                   shared.d_model(), "d_model", 1, d_model(), "the shared expert reads d_model");
    require_shapes(gate.size() == 0 || gate.size() == d_model(), "MixtureOfExperts::set_shared",
                   "w_g", 1, gate.size(), "d_model", 1, d_model(), "the gate is (d_model)");
    shared_ = std::move(shared);
    shared_gate_ = std::move(gate);
  }

  /// The routing of X's rows (see route()).
  [[nodiscard]] Routing routing(ConstMatrixRef<T> x) const {
    check_input(x);
    RowMatrix<T> logits(x.rows(), n_experts());
    logits.noalias() = x * w_r_;  // (N, E)
    if (router_.selection == ExpertSelection::kBiasedGroupTopK &&
        bias_.size() != static_cast<std::size_t>(n_experts()))
      throw std::logic_error(
          "kappa: MixtureOfExperts: the biased group selection needs set_selection_bias()");
    return route(router_, logits.template cast<double>(), bias_);
  }

  /// F(X) for X (N, d); returns (N, d). Tokens routed to one expert go
  /// through it as one product. \throws ShapeError unless X has d columns.
  [[nodiscard]] RowMatrix<T> forward(ConstMatrixRef<T> x) const {
    const Routing r = routing(x);
    if (x.rows() == 1) return forward_one(x, r);
    const Index n = x.rows(), d = d_model(), k = r.k;
    RowMatrix<T> y = RowMatrix<T>::Zero(n, d);
    // Token rows per expert held, in token order.
    std::vector<std::vector<std::pair<Index, T>>> rows(experts_.size());
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < k; ++j) {
        const auto at = static_cast<std::size_t>(i * k + j);
        if (!holds(r.experts[at])) continue;
        rows[static_cast<std::size_t>(r.experts[at] - first_)].emplace_back(
            i, static_cast<T>(r.weights[at]));
      }
    RowMatrix<T> xe;
    for (std::size_t e = 0; e < experts_.size(); ++e) {
      const auto& re = rows[e];
      if (re.empty()) continue;
      const auto m = static_cast<Index>(re.size());
      xe.resize(m, d);
      for (Index t = 0; t < m; ++t) xe.row(t) = x.row(re[static_cast<std::size_t>(t)].first);
      const RowMatrix<T> ye = experts_[e].forward(xe);  // (m, d)
      for (Index t = 0; t < m; ++t) {
        const auto& [i, w] = re[static_cast<std::size_t>(t)];
        y.row(i) += w * ye.row(t);
      }
    }
    if (shared_) {
      RowMatrix<T> ys = shared_->forward(x);  // (N, d)
      if (shared_gate_.size() > 0) {
        const Vector<T> g = x * shared_gate_.transpose();  // (N)
        for (Index i = 0; i < n; ++i)
          ys.row(i) *= static_cast<T>(1) / (static_cast<T>(1) + std::exp(-g(i)));
      }
      y += ys;
    }
    return y;
  }

  /// Bytes of every weight held.
  [[nodiscard]] std::size_t weight_bytes() const {
    std::size_t b = router_bytes();
    for (const Expert& x : experts_) b += x.weight_bytes();
    if (shared_) b += shared_->weight_bytes();
    return b;
  }
  /// Bytes one decode step (one token) reads: the router, k experts and the
  /// shared expert.
  [[nodiscard]] std::size_t decode_bytes() const {
    std::size_t b = router_bytes();
    if (!experts_.empty())
      b += static_cast<std::size_t>(std::min(top_k(), n_held())) * experts_[0].weight_bytes();
    if (shared_) b += shared_->weight_bytes();
    return b;
  }

 private:
  void require_held(Index e) const {
    if (n_held() == n_experts())
      require_index("MixtureOfExperts: expert", e, n_experts(), "the experts");
    if (!holds(e))
      throw RangeError("kappa: MixtureOfExperts: expert " + std::to_string(e) +
                       " is not held (this mixture holds experts [" + std::to_string(first_) +
                       ", " + std::to_string(first_ + n_held()) + ") of " +
                       std::to_string(n_experts()) + ")");
  }
  void check_input(ConstMatrixRef<T> x) const {
    require_shapes(x.cols() == d_model(), "MixtureOfExperts::forward", "X", x.rows(), x.cols(),
                   "W_r", d_model(), n_experts(), "X must have d_model columns");
  }
  /// F(x) for one token (decoding): the k chosen experts and the shared one
  /// read x directly (no gathering), and with num_threads() > 1 the experts
  /// are shared out among the threads, whole experts, the widest first
  /// (dynamic schedule): one fork-join per layer instead of two per expert,
  /// and a thread that is held up (another process on its core) leaves its
  /// remaining experts to the others. Each expert's products run as on one
  /// thread (OpenMP's default gives a parallel region inside another one
  /// thread; a user who enables nesting gets threads within threads), and
  /// the sum is formed in the order of forward()'s general path, so the
  /// result is the same at any thread count.
  [[nodiscard]] RowMatrix<T> forward_one(ConstMatrixRef<T> x, const Routing& r) const {
    // The chosen experts held, in index order (the order the general path
    // adds them).
    std::vector<std::pair<Index, T>> chosen;
    chosen.reserve(static_cast<std::size_t>(r.k));
    for (Index j = 0; j < r.k; ++j)
      if (holds(r.experts[static_cast<std::size_t>(j)]))
        chosen.emplace_back(r.experts[static_cast<std::size_t>(j)],
                            static_cast<T>(r.weights[static_cast<std::size_t>(j)]));
    const auto k = static_cast<Index>(chosen.size());
    std::sort(chosen.begin(), chosen.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    // Work items 0 .. k - 1: the chosen experts; k: the shared expert.
    const auto n_items = static_cast<int>(k + (shared_ ? 1 : 0));
    const auto expert_of = [&](int item) -> const Expert& {
      return item < k ? experts_[static_cast<std::size_t>(
                            chosen[static_cast<std::size_t>(item)].first - first_)]
                      : *shared_;
    };
    std::vector<RowMatrix<T>> out(static_cast<std::size_t>(n_items));
    const int threads = std::min(num_threads(), n_items);
    if (threads <= 1) {
      for (int item = 0; item < n_items; ++item)
        out[static_cast<std::size_t>(item)] = expert_of(item).forward(x);
    } else {
      // The widest first (the shared expert is often several experts wide).
      std::vector<int> order(static_cast<std::size_t>(n_items));
      for (int item = 0; item < n_items; ++item) order[static_cast<std::size_t>(item)] = item;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return expert_of(a).d_ff() > expert_of(b).d_ff(); });
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
#endif
      for (int at = 0; at < n_items; ++at) {
        const int item = order[static_cast<std::size_t>(at)];
        out[static_cast<std::size_t>(item)] = expert_of(item).forward(x);
      }
    }
    RowMatrix<T> y = RowMatrix<T>::Zero(1, d_model());
    for (Index j = 0; j < k; ++j)
      y.row(0) +=
          chosen[static_cast<std::size_t>(j)].second * out[static_cast<std::size_t>(j)].row(0);
    if (shared_) {
      RowMatrix<T>& ys = out[static_cast<std::size_t>(k)];
      if (shared_gate_.size() > 0) {
        const Vector<T> g = x * shared_gate_.transpose();  // (1)
        ys.row(0) *= static_cast<T>(1) / (static_cast<T>(1) + std::exp(-g(0)));
      }
      y += ys;
    }
    return y;
  }
  [[nodiscard]] std::size_t router_bytes() const {
    return sizeof(T) * static_cast<std::size_t>(w_r_.size() + shared_gate_.size()) +
           sizeof(double) * bias_.size();
  }

  RouterConfig router_;
  RowMatrix<T> w_r_;
  std::vector<Expert> experts_;
  Index first_ = 0;  // experts_[i] is expert first_ + i
  std::vector<double> bias_;
  std::optional<Expert> shared_;
  RowVector<T> shared_gate_;
};

/// A feed-forward that is one of two kinds, chosen per layer when the model
/// is built: the policy of models whose layers differ in their feed-forward
/// (DeepSeek's first_k_dense_replace dense layers before the
/// mixture-of-experts ones; Qwen2-MoE's mlp_only_layers). Each call goes to
/// the kind it holds.
template <class Dense, class Sparse>
class DenseOrSparse {
 public:
  using value_type = typename Dense::value_type;
  DenseOrSparse(Dense f) : f_(std::move(f)) {}   // NOLINT(google-explicit-constructor)
  DenseOrSparse(Sparse f) : f_(std::move(f)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool is_sparse() const { return std::holds_alternative<Sparse>(f_); }
  [[nodiscard]] const std::variant<Dense, Sparse>& get() const { return f_; }

  [[nodiscard]] RowMatrix<value_type> forward(ConstMatrixRef<value_type> x) const {
    return std::visit([&](const auto& f) -> RowMatrix<value_type> { return f.forward(x); }, f_);
  }
  [[nodiscard]] std::size_t weight_bytes() const {
    return std::visit([](const auto& f) { return f.weight_bytes(); }, f_);
  }
  /// Bytes one decode step reads (a dense feed-forward's: all of them).
  [[nodiscard]] std::size_t decode_bytes() const {
    return std::visit(
        [](const auto& f) {
          if constexpr (requires { f.decode_bytes(); }) {
            return f.decode_bytes();
          } else {
            return f.weight_bytes();
          }
        },
        f_);
  }

 private:
  std::variant<Dense, Sparse> f_;
};

}  // namespace kappa
