// Multi-head, grouped-query and multi-query attention (one Python class:
// H_kv = H is MHA, H_kv = 1 MQA) with softmax heads, and its KV cache in
// every storage format (native, bf16, f16, int8).
#include <memory>
#include <variant>

#include "common.hpp"
#include "kappa/cache/kv_cache.hpp"
#include "kappa/heads/multi_head_attention.hpp"

namespace kappa::python {

namespace {

template <class T>
using Layer = GroupedQueryAttention<T, kernels::Softmax>;

template <class T, class F>
using Cache = KVCache<T, cache::Growable, F>;

/// A KV cache of any scalar type and storage format.
class PyKVCache {
 public:
  using Any = std::variant<Cache<float, cache::Native>, Cache<float, cache::BF16>,
                           Cache<float, cache::F16>, Cache<float, cache::Int8>,
                           Cache<double, cache::Native>, Cache<double, cache::BF16>,
                           Cache<double, cache::F16>, Cache<double, cache::Int8>>;

  PyKVCache(const KVCacheConfig& c, bool f32, cache::Format format, Index capacity)
      : any_(make(c, f32, format, capacity)), f32_(f32), format_(format) {}

  [[nodiscard]] bool f32() const { return f32_; }
  [[nodiscard]] cache::Format format() const { return format_; }
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), any_);
  }

  Any any_;

 private:
  static Any make(const KVCacheConfig& c, bool f32, cache::Format format, Index capacity) {
    const cache::Growable r{capacity};
    if (f32) {
      switch (format) {
        case cache::Format::kBF16:
          return Any(std::in_place_index<1>, c, r);
        case cache::Format::kF16:
          return Any(std::in_place_index<2>, c, r);
        case cache::Format::kInt8:
          return Any(std::in_place_index<3>, c, r);
        case cache::Format::kNative:
          break;
      }
      return Any(std::in_place_index<0>, c, r);
    }
    switch (format) {
      case cache::Format::kBF16:
        return Any(std::in_place_index<5>, c, r);
      case cache::Format::kF16:
        return Any(std::in_place_index<6>, c, r);
      case cache::Format::kInt8:
        return Any(std::in_place_index<7>, c, r);
      case cache::Format::kNative:
        break;
    }
    return Any(std::in_place_index<4>, c, r);
  }
  bool f32_;
  cache::Format format_;
};

template <class C>
struct ScalarOf;
template <class T, class R, class F>
struct ScalarOf<KVCache<T, R, F>> {
  using type = T;
};

py::array cache_rows(PyKVCache& self, Index g, bool keys) {
  return self.visit([&](auto& c) -> py::array {
    using T = typename ScalarOf<std::decay_t<decltype(c)>>::type;
    const Index first = c.first_position();
    const Index count = c.length() - first;
    const Index width = keys ? c.config().d_head : c.config().value_width();
    RowMatrix<T> out(count, width);
    if (keys)
      c.copy_keys(g, first, count, out);
    else
      c.copy_values(g, first, count, out);
    return to_numpy(std::move(out));
  });
}

/// One attention layer of float or double.
class PyHeads {
 public:
  PyHeads(const HeadsConfig& c, bool f32) : f32_(f32) {
    if (f32)
      layer_ = std::make_unique<Layer<float>>(c);
    else
      layer_ = std::make_unique<Layer<double>>(c);
  }
  [[nodiscard]] bool f32() const { return f32_; }
  [[nodiscard]] const HeadsConfig& config() const {
    return std::visit([](const auto& l) -> const HeadsConfig& { return l->config(); }, layer_);
  }
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit([&](auto& l) -> decltype(auto) { return f(*l); }, layer_);
  }

 private:
  std::variant<std::unique_ptr<Layer<float>>, std::unique_ptr<Layer<double>>> layer_;
  bool f32_;
};

template <class L>
using ScalarOfLayer = typename L::value_type;

template <class T>
RowVector<T> optional_vector(const py::object& obj, const char* name) {
  if (obj.is_none()) return RowVector<T>();
  return to_row_vector<T>(obj, name);
}

constexpr const char* kMaskDoc =
    "mask: None/'none', 'causal', 'sliding' (window=W), 'padding' (lengths=), or a boolean "
    "(N_Q, N_KV) array; offset as in kappa.attention.";

}  // namespace

void register_heads(py::module_& m) {
  py::class_<PyKVCache>(m, "KVCache",
                        "One layer's KV cache: K_g and V_g of each kv head, stored as 'native' "
                        "(the layer's dtype), 'bf16', 'f16' or 'int8'. Make it with "
                        "layer.make_cache(format).")
      .def_property_readonly(
          "length", [](PyKVCache& c) { return c.visit([](auto& x) { return x.length(); }); },
          "Tokens held (positions 0 .. length - 1).")
      .def_property_readonly(
          "capacity", [](PyKVCache& c) { return c.visit([](auto& x) { return x.capacity(); }); })
      .def_property_readonly(
          "bytes", [](PyKVCache& c) { return c.visit([](auto& x) { return x.bytes(); }); },
          "Bytes of the live tokens.")
      .def_property_readonly(
          "bytes_per_token",
          [](PyKVCache& c) { return c.visit([](auto& x) { return x.bytes_per_token(); }); })
      .def_property_readonly("format",
                             [](PyKVCache& c) { return std::string(cache::to_string(c.format())); })
      .def_property_readonly(
          "dtype", [](PyKVCache& c) { return py::dtype(c.f32() ? "float32" : "float64"); })
      .def(
          "reset", [](PyKVCache& c) { c.visit([](auto& x) { x.reset(); }); }, "Forget every token.")
      .def(
          "truncate", [](PyKVCache& c, Index len) { c.visit([&](auto& x) { x.truncate(len); }); },
          py::arg("length"), "Keep the first `length` tokens (roll back rejected drafts).")
      .def(
          "keys", [](PyKVCache& c, Index g) { return cache_rows(c, g, true); }, py::arg("g"),
          "K_g (length x d_head), decoded to the layer's dtype (a copy).")
      .def(
          "values", [](PyKVCache& c, Index g) { return cache_rows(c, g, false); }, py::arg("g"),
          "V_g (length x d_v), decoded to the layer's dtype (a copy).")
      .def("__len__", [](PyKVCache& c) { return c.visit([](auto& x) { return x.length(); }); });

  py::class_<PyHeads>(m, "MultiHeadAttention",
                      R"doc(Multi-head attention with softmax heads (section 2.2 of the paper):

    Q = X^Q W^Q + b_Q,  K = X^K W^K + b_K,  V = X^V W^V + b_V   (head h = column block h)
    Y_h = softmax(Q_h K_g^T / sqrt(d_head)) V_g,  g = h / (H / H_kv)
    Y = [Y_1 ... Y_H] W^O + b_O

n_kv_heads = 0 or n_heads is MHA, a divisor of n_heads grouped-query attention,
1 multi-query attention (K and V are never repeated). A new layer's weights are
zero until set (set_weights, set_weights_from_torch_mha, set_weights_from_hf)
or drawn (init_random). dtype float32 or float64: inputs of that dtype pass
without a copy.)doc")
      .def(py::init([](Index d_in, Index n_heads, Index d_head, Index n_kv_heads, Index d_v,
                       Index d_kv_in, Index d_out, const py::object& dtype) {
             HeadsConfig c{.d_in = d_in,
                           .n_heads = n_heads,
                           .d_head = d_head,
                           .n_kv_heads = n_kv_heads,
                           .d_v = d_v,
                           .d_kv_in = d_kv_in,
                           .d_out = d_out};
             return std::make_unique<PyHeads>(c, parse_dtype(dtype));
           }),
           py::arg("d_in"), py::arg("n_heads"), py::kw_only(), py::arg("d_head") = 0,
           py::arg("n_kv_heads") = 0, py::arg("d_v") = 0, py::arg("d_kv_in") = 0,
           py::arg("d_out") = 0, py::arg("dtype") = "float32")
      .def_property_readonly("dtype",
                             [](PyHeads& h) { return py::dtype(h.f32() ? "float32" : "float64"); })
      .def_property_readonly("d_in", [](PyHeads& h) { return h.config().d_in; })
      .def_property_readonly("n_heads", [](PyHeads& h) { return h.config().n_heads; })
      .def_property_readonly("n_kv_heads", [](PyHeads& h) { return h.config().n_kv_heads; })
      .def_property_readonly("d_head", [](PyHeads& h) { return h.config().d_head; })
      .def_property_readonly("d_v", [](PyHeads& h) { return h.config().d_v; })
      .def_property_readonly("d_kv_in", [](PyHeads& h) { return h.config().d_kv_in; })
      .def_property_readonly("d_out", [](PyHeads& h) { return h.config().d_out; })
      .def(
          "init_random",
          [](PyHeads& h, std::uint64_t seed) { h.visit([&](auto& l) { l.init_random(seed); }); },
          py::arg("seed"),
          "Draws W^Q, W^K, W^V, W^O from kappa's seeded generator (U(-a, a], a = sqrt(3 / "
          "fan_in)); removes the biases.")
      .def(
          "set_weights",
          [](PyHeads& h, const py::object& w_q, const py::object& w_k, const py::object& w_v,
             const py::object& w_o, const py::object& b_q, const py::object& b_k,
             const py::object& b_v, const py::object& b_o) {
            h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> q(w_q, "w_q"), k(w_k, "w_k"), v(w_v, "w_v"), o(w_o, "w_o");
              l.set_weights(q, k, v, o);
              l.set_biases(optional_vector<T>(b_q, "b_q"), optional_vector<T>(b_k, "b_k"),
                           optional_vector<T>(b_v, "b_v"), optional_vector<T>(b_o, "b_o"));
            });
          },
          py::arg("w_q"), py::arg("w_k"), py::arg("w_v"), py::arg("w_o"), py::kw_only(),
          py::arg("b_q") = py::none(), py::arg("b_k") = py::none(), py::arg("b_v") = py::none(),
          py::arg("b_o") = py::none(),
          "W^Q (d_in, H d_head), W^K (d_kv_in, H_kv d_head), W^V (d_kv_in, H_kv d_v), W^O "
          "(H d_v, d_out) in the paper's convention (Q = X W^Q), and optional biases.")
      .def(
          "set_weights_from_torch_mha",
          [](PyHeads& h, const py::object& in_w, const py::object& out_w, const py::object& in_b,
             const py::object& out_b) {
            h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> i(in_w, "in_proj_weight"), o(out_w, "out_proj.weight");
              l.set_weights_from_torch_mha(i, o);
              if (!in_b.is_none() || !out_b.is_none())
                l.set_biases_from_torch_mha(optional_vector<T>(in_b, "in_proj_bias"),
                                            optional_vector<T>(out_b, "out_proj.bias"));
            });
          },
          py::arg("in_proj_weight"), py::arg("out_proj_weight"),
          py::arg("in_proj_bias") = py::none(), py::arg("out_proj_bias") = py::none(),
          "The weights (and biases) of torch.nn.MultiheadAttention (batch_first or not: the "
          "same tensors).")
      .def(
          "set_weights_from_hf",
          [](PyHeads& h, const py::object& qp, const py::object& kp, const py::object& vp,
             const py::object& op) {
            h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              l.set_weights_from_hf(
                  InMatrix<T>(qp, "q_proj").ref(), InMatrix<T>(kp, "k_proj").ref(),
                  InMatrix<T>(vp, "v_proj").ref(), InMatrix<T>(op, "o_proj").ref());
            });
          },
          py::arg("q_proj"), py::arg("k_proj"), py::arg("v_proj"), py::arg("o_proj"),
          "Hugging Face nn.Linear weights (out_features x in_features).")
      .def_property_readonly(
          "w_q",
          [](PyHeads& h) {
            return h.visit(
                [](auto& l) { return to_numpy(std::decay_t<decltype(l.w_q())>(l.w_q())); });
          },
          "W^Q (a copy)")
      .def_property_readonly(
          "w_k",
          [](PyHeads& h) {
            return h.visit(
                [](auto& l) { return to_numpy(std::decay_t<decltype(l.w_k())>(l.w_k())); });
          },
          "W^K (a copy)")
      .def_property_readonly(
          "w_v",
          [](PyHeads& h) {
            return h.visit(
                [](auto& l) { return to_numpy(std::decay_t<decltype(l.w_v())>(l.w_v())); });
          },
          "W^V (a copy)")
      .def_property_readonly(
          "w_o",
          [](PyHeads& h) {
            return h.visit(
                [](auto& l) { return to_numpy(std::decay_t<decltype(l.w_o())>(l.w_o())); });
          },
          "W^O (a copy)")
      .def(
          "forward",
          [](PyHeads& h, const py::object& x, const py::object& mask, std::optional<Index> offset,
             std::optional<Index> window, const py::object& lengths) {
            const MaskSpec ms = parse_mask(mask, offset, window, lengths);
            return h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> xm(x, "x");
              RowMatrix<T> y;
              {
                py::gil_scoped_release release;
                with_mask(ms, [&](const auto& mk) { y = l.forward(xm.ref(), mk); });
              }
              return to_numpy(std::move(y));
            });
          },
          py::arg("x"), py::arg("mask") = py::none(), py::kw_only(), py::arg("offset") = py::none(),
          py::arg("window") = py::none(), py::arg("lengths") = py::none(),
          (std::string("Self-attention of x (N, d_in): Y (N, d_out).\n") + kMaskDoc).c_str())
      .def(
          "forward_cross",
          [](PyHeads& h, const py::object& xq, const py::object& xkv, const py::object& mask,
             std::optional<Index> offset, std::optional<Index> window, const py::object& lengths) {
            const MaskSpec ms = parse_mask(mask, offset, window, lengths);
            return h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> qm(xq, "xq"), kvm(xkv, "xkv");
              RowMatrix<T> y;
              {
                py::gil_scoped_release release;
                with_mask(ms,
                          [&](const auto& mk) { y = l.forward_cross(qm.ref(), kvm.ref(), mk); });
              }
              return to_numpy(std::move(y));
            });
          },
          py::arg("xq"), py::arg("xkv"), py::arg("mask") = py::none(), py::kw_only(),
          py::arg("offset") = py::none(), py::arg("window") = py::none(),
          py::arg("lengths") = py::none(),
          "Cross-attention: queries from xq (N_Q, d_in), keys and values from xkv (N_KV, d_kv_in).")
      .def(
          "head_weights",
          [](PyHeads& h, const py::object& xq, const py::object& xkv, const py::object& mask,
             std::optional<Index> offset, std::optional<Index> window, const py::object& lengths) {
            const MaskSpec ms = parse_mask(mask, offset, window, lengths);
            return h.visit([&](auto& l) {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> qm(xq, "xq");
              const InMatrix<T> kvm(xkv.is_none() ? xq : xkv, "xkv");
              py::array_t<T> out;
              HeadWeights<T> w;
              {
                py::gil_scoped_release release;
                with_mask(ms, [&](const auto& mk) { w = l.head_weights(qm.ref(), kvm.ref(), mk); });
              }
              const auto heads = static_cast<py::ssize_t>(w.size());
              const auto nq = static_cast<py::ssize_t>(qm.map.rows());
              const auto nkv = static_cast<py::ssize_t>(kvm.map.rows());
              out = py::array_t<T>({heads, nq, nkv});
              T* dst = out.mutable_data();
              for (const auto& a : w.heads()) dst = std::copy(a.data(), a.data() + a.size(), dst);
              return py::array(out);
            });
          },
          py::arg("xq"), py::arg("xkv") = py::none(), py::arg("mask") = py::none(), py::kw_only(),
          py::arg("offset") = py::none(), py::arg("window") = py::none(),
          py::arg("lengths") = py::none(),
          "Z_h^-1 A_h of every head, as one (H, N_Q, N_KV) array (xkv None: self-attention).")
      .def(
          "make_cache",
          [](PyHeads& h, const std::string& format, Index capacity) {
            const HeadsConfig& c = h.config();
            return PyKVCache(KVCacheConfig{c.n_kv_heads, c.d_head, c.d_v}, h.f32(),
                             cache::parse_format(format), capacity);
          },
          py::arg("format") = "native", py::arg("capacity") = 256,
          "An empty KV cache for this layer: format 'native' (the layer's dtype), 'bf16', "
          "'f16' or 'int8'; it grows from `capacity` tokens.")
      .def(
          "forward_cached",
          [](PyHeads& h, const py::object& x, PyKVCache& cache) {
            if (cache.f32() != h.f32())
              throw std::invalid_argument("kappa: the cache's dtype is not the layer's");
            return h.visit([&](auto& l) -> py::array {
              using T = ScalarOfLayer<std::decay_t<decltype(l)>>;
              const InMatrix<T> xm(x, "x");
              RowMatrix<T> y;
              cache.visit([&](auto& c) {
                using C = std::decay_t<decltype(c)>;
                if constexpr (std::is_same_v<typename ScalarOf<C>::type, T>) {
                  py::gil_scoped_release release;
                  y = l.forward_cached(xm.ref(), c);
                }
              });
              return to_numpy(std::move(y));
            });
          },
          py::arg("x"), py::arg("cache"),
          "Causal self-attention of x's n new tokens (n, d_in) after the cache's: appends their "
          "K, V to the cache; prefill then one call per token equals forward(all, 'causal').");
}

}  // namespace kappa::python
