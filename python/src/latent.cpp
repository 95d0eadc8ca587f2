// Multi-head latent attention (DeepSeek-V2 MLA), naive and absorbed paths,
// and its latent cache in every storage format.
#include <memory>
#include <variant>

#include "common.hpp"
#include "kappa/heads/latent.hpp"

namespace kappa::python {

namespace {

template <class T, class F>
using LCache = LatentCache<T, cache::Growable, F>;

template <class C>
struct CacheScalar;
template <class T, class R, class F>
struct CacheScalar<LatentCache<T, R, F>> {
  using type = T;
};

class PyLatentCache {
 public:
  using Any = std::variant<LCache<float, cache::Native>, LCache<float, cache::BF16>,
                           LCache<float, cache::F16>, LCache<float, cache::Int8>,
                           LCache<double, cache::Native>, LCache<double, cache::BF16>,
                           LCache<double, cache::F16>, LCache<double, cache::Int8>>;
  PyLatentCache(const LatentConfig& c, bool f32, cache::Format f, Index capacity)
      : any_(make(c, f32, f, capacity)), f32_(f32), format_(f) {}
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), any_);
  }
  [[nodiscard]] bool f32() const { return f32_; }
  [[nodiscard]] cache::Format format() const { return format_; }

 private:
  static Any make(const LatentConfig& c, bool f32, cache::Format f, Index capacity) {
    const cache::Growable r{capacity};
    const std::size_t base = f32 ? 0 : 4;
    const std::size_t i = base + static_cast<std::size_t>(f);  // Format: native, bf16, f16, int8
    switch (i) {
      case 1:
        return Any(std::in_place_index<1>, c, r);
      case 2:
        return Any(std::in_place_index<2>, c, r);
      case 3:
        return Any(std::in_place_index<3>, c, r);
      case 4:
        return Any(std::in_place_index<4>, c, r);
      case 5:
        return Any(std::in_place_index<5>, c, r);
      case 6:
        return Any(std::in_place_index<6>, c, r);
      case 7:
        return Any(std::in_place_index<7>, c, r);
      default:
        return Any(std::in_place_index<0>, c, r);
    }
  }
  Any any_;
  bool f32_;
  cache::Format format_;
};

class PyLatent {
 public:
  PyLatent(const LatentConfig& c, bool f32, bool absorbed) : f32_(f32), config_(c) {
    if (f32 && absorbed)
      layer_.emplace<0>(std::make_unique<LatentAttention<float, AbsorbedLatent>>(c));
    if (f32 && !absorbed)
      layer_.emplace<1>(std::make_unique<LatentAttention<float, NaiveLatent>>(c));
    if (!f32 && absorbed)
      layer_.emplace<2>(std::make_unique<LatentAttention<double, AbsorbedLatent>>(c));
    if (!f32 && !absorbed)
      layer_.emplace<3>(std::make_unique<LatentAttention<double, NaiveLatent>>(c));
    config_ = std::visit([](const auto& l) { return l->config(); }, layer_);
  }
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit([&](auto& l) -> decltype(auto) { return f(*l); }, layer_);
  }
  [[nodiscard]] bool f32() const { return f32_; }
  [[nodiscard]] const LatentConfig& config() const { return config_; }
  [[nodiscard]] bool absorbed() const { return layer_.index() % 2 == 0; }

 private:
  std::variant<std::unique_ptr<LatentAttention<float, AbsorbedLatent>>,
               std::unique_ptr<LatentAttention<float, NaiveLatent>>,
               std::unique_ptr<LatentAttention<double, AbsorbedLatent>>,
               std::unique_ptr<LatentAttention<double, NaiveLatent>>>
      layer_;
  bool f32_;
  LatentConfig config_;
};

template <class L>
struct LayerScalar;
template <class T, class P, class R>
struct LayerScalar<LatentAttention<T, P, R>> {
  using type = T;
};

template <class T>
py::array heads_array(const HeadWeights<T>& w, Index nq, Index nkv) {
  py::array_t<T> out({static_cast<py::ssize_t>(w.size()), static_cast<py::ssize_t>(nq),
                      static_cast<py::ssize_t>(nkv)});
  T* dst = out.mutable_data();
  for (const auto& a : w.heads()) dst = std::copy(a.data(), a.data() + a.size(), dst);
  return std::move(out);
}

}  // namespace

void register_latent(py::module_& m) {
  py::class_<PyLatentCache>(m, "LatentCache",
                            "The latent cache of LatentAttention: [c_KV | k^R], d_c + d_R values "
                            "per token whatever the number of heads, as 'native', 'bf16', 'f16' "
                            "or 'int8'.")
      .def_property_readonly(
          "length", [](PyLatentCache& c) { return c.visit([](auto& x) { return x.length(); }); })
      .def_property_readonly(
          "bytes", [](PyLatentCache& c) { return c.visit([](auto& x) { return x.bytes(); }); })
      .def_property_readonly(
          "bytes_per_token",
          [](PyLatentCache& c) { return c.visit([](auto& x) { return x.bytes_per_token(); }); })
      .def_property_readonly(
          "format", [](PyLatentCache& c) { return std::string(cache::to_string(c.format())); })
      .def("reset", [](PyLatentCache& c) { c.visit([](auto& x) { x.reset(); }); })
      .def(
          "truncate", [](PyLatentCache& c, Index n) { c.visit([&](auto& x) { x.truncate(n); }); },
          py::arg("length"))
      .def("__len__", [](PyLatentCache& c) { return c.visit([](auto& x) { return x.length(); }); });

  py::class_<PyLatent>(m, "LatentAttention",
                       R"doc(DeepSeek-V2's multi-head latent attention (causal self-attention):

    c_KV = RMSNorm(X W^DKV),  k^R = RoPE(X W^KR)          (cached: d_c + d_R per token)
    K^C_h = c_KV W^UK_h,  V_h = c_KV W^UV_h,  Q^C_h = X W^UQ_h,  Q^R_h = RoPE(X W^QR_h)
    Y = [softmax(s [Q^C_h Q^R_h][K^C_h k^R]^T, causal) V_h]_h W^O,  s = 1/sqrt(d_h + d_R)

(with d_q_latent > 0 the queries come from c_Q = RMSNorm(X W^DQ)). RoPE pairs
(2i, 2i + 1) as DeepSeek's checkpoints. path 'absorbed' folds W^UK into the query
and W^UV after the attention; 'naive' up-projects K and V; same results.)doc")
      .def(py::init([](Index d_model, Index n_heads, Index d_head, Index d_rope, Index d_latent,
                       Index d_v, Index d_q_latent, double norm_eps, double rope_base,
                       std::optional<double> scale, const std::string& path,
                       const py::object& dtype) {
             if (path != "absorbed" && path != "naive")
               throw std::invalid_argument("kappa: path must be 'absorbed' or 'naive', got '" +
                                           path + "'");
             LatentConfig c;
             c.d_model = d_model;
             c.n_heads = n_heads;
             c.d_head = d_head;
             c.d_rope = d_rope;
             c.d_latent = d_latent;
             c.d_v = d_v;
             c.d_q_latent = d_q_latent;
             c.norm_eps = norm_eps;
             c.rope_base = rope_base;
             c.scale = scale;
             return std::make_unique<PyLatent>(c, parse_dtype(dtype), path == "absorbed");
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("d_head"), py::arg("d_rope"),
           py::arg("d_latent"), py::kw_only(), py::arg("d_v") = 0, py::arg("d_q_latent") = 0,
           py::arg("norm_eps") = 1e-6, py::arg("rope_base") = 10000.0,
           py::arg("scale") = py::none(), py::arg("path") = "absorbed",
           py::arg("dtype") = "float32")
      .def_property_readonly("dtype",
                             [](PyLatent& l) { return py::dtype(l.f32() ? "float32" : "float64"); })
      .def_property_readonly(
          "path", [](PyLatent& l) { return std::string(l.absorbed() ? "absorbed" : "naive"); })
      .def_property_readonly("d_model", [](PyLatent& l) { return l.config().d_model; })
      .def_property_readonly("n_heads", [](PyLatent& l) { return l.config().n_heads; })
      .def_property_readonly("d_head", [](PyLatent& l) { return l.config().d_head; })
      .def_property_readonly("d_rope", [](PyLatent& l) { return l.config().d_rope; })
      .def_property_readonly("d_v", [](PyLatent& l) { return l.config().value_width(); })
      .def_property_readonly("d_latent", [](PyLatent& l) { return l.config().d_latent; })
      .def_property_readonly("d_q_latent", [](PyLatent& l) { return l.config().d_q_latent; })
      .def(
          "init_random",
          [](PyLatent& l, std::uint64_t seed) { l.visit([&](auto& x) { x.init_random(seed); }); },
          py::arg("seed"))
      .def(
          "set_weights",
          [](PyLatent& l, const py::object& w_uq, const py::object& w_qr, const py::object& w_dkv,
             const py::object& w_uk, const py::object& w_uv, const py::object& w_kr,
             const py::object& w_o, const py::object& kv_norm, const py::object& w_dq,
             const py::object& q_norm) {
            l.visit([&](auto& x) {
              using T = typename LayerScalar<std::decay_t<decltype(x)>>::type;
              LatentWeights<T> w;
              w.w_uq = InMatrix<T>(w_uq, "w_uq").map;
              w.w_qr = InMatrix<T>(w_qr, "w_qr").map;
              w.w_dkv = InMatrix<T>(w_dkv, "w_dkv").map;
              w.w_uk = InMatrix<T>(w_uk, "w_uk").map;
              w.w_uv = InMatrix<T>(w_uv, "w_uv").map;
              w.w_kr = InMatrix<T>(w_kr, "w_kr").map;
              w.w_o = InMatrix<T>(w_o, "w_o").map;
              w.kv_norm = kv_norm.is_none() ? RowVector<T>::Ones(l.config().d_latent)
                                            : to_row_vector<T>(kv_norm, "kv_norm");
              if (!w_dq.is_none()) w.w_dq = InMatrix<T>(w_dq, "w_dq").map;
              if (l.config().d_q_latent > 0)
                w.q_norm = q_norm.is_none() ? RowVector<T>::Ones(l.config().d_q_latent)
                                            : to_row_vector<T>(q_norm, "q_norm");
              x.set_weights(std::move(w));
            });
          },
          py::arg("w_uq"), py::arg("w_qr"), py::arg("w_dkv"), py::arg("w_uk"), py::arg("w_uv"),
          py::arg("w_kr"), py::arg("w_o"), py::kw_only(), py::arg("kv_norm") = py::none(),
          py::arg("w_dq") = py::none(), py::arg("q_norm") = py::none(),
          "The paper's matrices: W^UQ (d or d_cq, H d_h) [W^Q without query compression], "
          "W^QR (., H d_R), W^DKV (d, d_c), W^UK (d_c, H d_h), W^UV (d_c, H d_v), W^KR (d, d_R), "
          "W^O (H d_v, d); RMSNorm gains kv_norm (d_c) and q_norm (d_cq) default to ones.")
      .def_property_readonly(
          "weights",
          [](PyLatent& l) {
            return l.visit([](auto& x) {
              const auto& w = x.weights();
              py::dict d;
              d["w_uq"] =
                  to_numpy(RowMatrix<typename std::decay_t<decltype(w.w_uq)>::Scalar>(w.w_uq));
              d["w_qr"] = to_numpy(std::decay_t<decltype(w.w_qr)>(w.w_qr));
              d["w_dkv"] = to_numpy(std::decay_t<decltype(w.w_dkv)>(w.w_dkv));
              d["w_uk"] = to_numpy(std::decay_t<decltype(w.w_uk)>(w.w_uk));
              d["w_uv"] = to_numpy(std::decay_t<decltype(w.w_uv)>(w.w_uv));
              d["w_kr"] = to_numpy(std::decay_t<decltype(w.w_kr)>(w.w_kr));
              d["w_o"] = to_numpy(std::decay_t<decltype(w.w_o)>(w.w_o));
              d["kv_norm"] = to_numpy(std::decay_t<decltype(w.kv_norm)>(w.kv_norm));
              d["w_dq"] = to_numpy(std::decay_t<decltype(w.w_dq)>(w.w_dq));
              d["q_norm"] = to_numpy(std::decay_t<decltype(w.q_norm)>(w.q_norm));
              return d;
            });
          },
          "The weights as a dict of arrays (copies).")
      .def(
          "forward",
          [](PyLatent& l, const py::object& x, Index first_position) {
            return l.visit([&](auto& layer) {
              using T = typename LayerScalar<std::decay_t<decltype(layer)>>::type;
              const InMatrix<T> xm(x, "x");
              RowMatrix<T> y;
              {
                py::gil_scoped_release release;
                y = layer.forward(xm.ref(), first_position);
              }
              return to_numpy(std::move(y));
            });
          },
          py::arg("x"), py::arg("first_position") = 0,
          "Causal self-attention over x (N, d), token i at position first_position + i.")
      .def(
          "head_weights",
          [](PyLatent& l, const py::object& x, Index first_position) {
            return l.visit([&](auto& layer) {
              using T = typename LayerScalar<std::decay_t<decltype(layer)>>::type;
              const InMatrix<T> xm(x, "x");
              HeadWeights<T> w;
              {
                py::gil_scoped_release release;
                w = layer.head_weights(xm.ref(), first_position);
              }
              return heads_array<T>(w, xm.map.rows(), xm.map.rows());
            });
          },
          py::arg("x"), py::arg("first_position") = 0, "Z_h^-1 A_h of every head: (H, N, N).")
      .def(
          "latent_rows",
          [](PyLatent& l, const py::object& x, Index first_position) {
            return l.visit([&](auto& layer) {
              using T = typename LayerScalar<std::decay_t<decltype(layer)>>::type;
              const InMatrix<T> xm(x, "x");
              return to_numpy(layer.latent_rows(xm.ref(), first_position));
            });
          },
          py::arg("x"), py::arg("first_position") = 0,
          "The cache rows [c_KV | k^R] of x: (N, d_c + d_R).")
      .def(
          "make_cache",
          [](PyLatent& l, const std::string& format, Index capacity) {
            return PyLatentCache(l.config(), l.f32(), cache::parse_format(format), capacity);
          },
          py::arg("format") = "native", py::arg("capacity") = 256)
      .def(
          "forward_cached",
          [](PyLatent& l, const py::object& x, PyLatentCache& cache) {
            if (cache.f32() != l.f32())
              throw std::invalid_argument("kappa: the cache's dtype is not the layer's");
            return l.visit([&](auto& layer) -> py::array {
              using T = typename LayerScalar<std::decay_t<decltype(layer)>>::type;
              const InMatrix<T> xm(x, "x");
              RowMatrix<T> y;
              cache.visit([&](auto& c) {
                if constexpr (std::is_same_v<typename CacheScalar<std::decay_t<decltype(c)>>::type,
                                             T>) {
                  py::gil_scoped_release release;
                  y = layer.forward_cached(xm.ref(), c);
                }
              });
              return to_numpy(std::move(y));
            });
          },
          py::arg("x"), py::arg("cache"),
          "Appends x's tokens to the latent cache and attends from them to every cached token "
          "(causal).");
}

}  // namespace kappa::python
