// Whole models through kappa::runtime (compiled once in that library, not
// here): load a Hugging Face directory or a GGUF file, forward to logits,
// inspect (hidden states, attention weights), generate with the options of
// kappa-generate, beam search, and streaming as a Python iterator.
#include <pybind11/functional.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common.hpp"
#include "kappa/runtime.hpp"

namespace kappa::python {

namespace {

py::str to_str(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

/// GenerateOptions from keyword arguments, with kappa-generate's rules:
/// greedy unless temperature (> 0), top_k, top_p, min_p or seed asks for
/// sampling; greedy=True or temperature=0 force greedy.
GenerateOptions parse_options(const runtime::Model& lm, const py::kwargs& kw) {
  GenerateOptions opt = lm.default_options();
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<Index> top_k;
  std::optional<std::uint64_t> seed;
  bool greedy = false, ignore_eos = false;
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    const py::handle v = item.second;
    if (v.is_none()) continue;
    if (key == "max_new_tokens") {
      opt.max_new_tokens = v.cast<Index>();
    } else if (key == "greedy") {
      greedy = v.cast<bool>();
    } else if (key == "temperature") {
      temperature = v.cast<double>();
    } else if (key == "top_k") {
      top_k = v.cast<Index>();
    } else if (key == "top_p") {
      top_p = v.cast<double>();
    } else if (key == "min_p") {
      min_p = v.cast<double>();
    } else if (key == "repetition_penalty") {
      repetition_penalty = v.cast<double>();
    } else if (key == "seed") {
      seed = v.cast<std::uint64_t>();
    } else if (key == "stop") {
      if (py::isinstance<py::str>(v))
        opt.stop_strings = {v.cast<std::string>()};
      else
        opt.stop_strings = v.cast<std::vector<std::string>>();
    } else if (key == "eos_ids") {
      opt.eos_ids = to_ids(v);
    } else if (key == "ignore_eos") {
      ignore_eos = v.cast<bool>();
    } else if (key == "cache_type") {
      opt.cache_format = cache::parse_format(v.cast<std::string>());
    } else if (key == "logprobs") {
      opt.logprobs = true;
      opt.top_logprobs = v.cast<Index>();
    } else if (key == "context_length") {
      opt.context_length = v.cast<Index>();
    } else if (key == "skip_special") {
      opt.skip_special = v.cast<bool>() ? tokenize::SkipSpecial::kYes : tokenize::SkipSpecial::kNo;
    } else {
      throw py::type_error("kappa: unknown generation option '" + key +
                           "' (max_new_tokens, greedy, temperature, top_k, top_p, min_p, "
                           "repetition_penalty, seed, stop, eos_ids, ignore_eos, cache_type, "
                           "logprobs, context_length, skip_special)");
    }
  }
  const bool zero_temperature = temperature && *temperature == 0;
  const bool sample =
      !greedy && !zero_temperature && (temperature || top_k || top_p || min_p || seed);
  opt.decoding = sample ? Decoding::kSample : Decoding::kGreedy;
  // Set whenever given: with greedy decoding validate() then names them (an
  // error rather than silently ignored); temperature 0 is itself greedy.
  if (sample && temperature) opt.sampling.temperature = *temperature;
  if (top_k) opt.sampling.top_k = *top_k;
  if (top_p) opt.sampling.top_p = *top_p;
  if (min_p) opt.sampling.min_p = *min_p;
  if (repetition_penalty) opt.sampling.repetition_penalty = *repetition_penalty;
  if (seed) opt.seed = *seed;
  if (ignore_eos) opt.eos_ids = std::vector<TokenId>{};
  opt.validate();
  return opt;
}

/// A prompt: text, or token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<TokenId> ids;
};
Prompt parse_prompt(const py::object& p) {
  Prompt out;
  if (py::isinstance<py::str>(p) || py::isinstance<py::bytes>(p))
    out.text = p.cast<std::string>();
  else
    out.ids = to_ids(p);
  return out;
}

Generation run_generate(const runtime::Model& lm, const Prompt& p, const GenerateOptions& opt,
                        const TextCallback& cb) {
  if (p.text) return lm.generate(*p.text, opt, cb);
  return lm.generate(std::span<const TokenId>(p.ids), opt, cb);
}

/// `for piece in model.stream(prompt, ...)`: generation runs on a C++
/// worker thread that never touches Python; pieces of text pass through a
/// queue, which __next__ waits on with the GIL released. Closing the stream
/// (close(), leaving a `with` block, or dropping the iterator, e.g. after a
/// `break`) asks the worker to stop at its next token and joins it.
class TextStream {
 public:
  TextStream(py::object model, const runtime::Model& lm, Prompt prompt, GenerateOptions opt)
      : model_(std::move(model)), state_(std::make_shared<State>()) {
    auto st = state_;
    worker_ = std::thread([st, &lm, prompt = std::move(prompt), opt = std::move(opt)] {
      try {
        Generation g = run_generate(lm, prompt, opt, [st](std::string_view piece) {
          {
            std::lock_guard<std::mutex> lock(st->mutex);
            st->pieces.emplace_back(piece);
          }
          st->cv.notify_one();
          return !st->stop.load();
        });
        std::lock_guard<std::mutex> lock(st->mutex);
        st->result = std::move(g);
      } catch (...) {
        std::lock_guard<std::mutex> lock(st->mutex);
        st->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(st->mutex);
        st->done = true;
      }
      st->cv.notify_one();
    });
  }
  TextStream(const TextStream&) = delete;
  TextStream& operator=(const TextStream&) = delete;
  ~TextStream() {
    if (!worker_.joinable()) return;
    state_->stop.store(true);
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;
      worker_.join();
    } else {
      worker_.join();
    }
  }

  py::str next() {
    std::string piece;
    bool have = false;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(state_->mutex);
      state_->cv.wait(lock, [&] { return !state_->pieces.empty() || state_->done; });
      if (!state_->pieces.empty()) {
        piece = std::move(state_->pieces.front());
        state_->pieces.pop_front();
        have = true;
      }
    }
    if (have) return to_str(piece);
    join();
    if (state_->error) {
      std::exception_ptr e = state_->error;
      state_->error = nullptr;
      std::rethrow_exception(e);
    }
    throw py::stop_iteration();
  }

  /// Stops generation (at the next token) and waits for the worker.
  void close() {
    state_->stop.store(true);
    join();
  }

  [[nodiscard]] std::optional<Generation> result() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done ? state_->result : std::nullopt;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::string> pieces;
    std::atomic<bool> stop{false};
    bool done = false;
    std::optional<Generation> result;
    std::exception_ptr error;
  };
  void join() {
    if (!worker_.joinable()) return;
    py::gil_scoped_release release;
    worker_.join();
  }

  py::object model_;  // keeps the model alive while the worker uses it
  std::shared_ptr<State> state_;
  std::thread worker_;
};

std::vector<tokenize::ChatMessage> parse_messages(const py::iterable& messages) {
  std::vector<tokenize::ChatMessage> out;
  for (py::handle h : messages) {
    if (py::isinstance<py::dict>(h)) {
      const auto d = py::reinterpret_borrow<py::dict>(h);
      out.push_back({d["role"].cast<std::string>(), d["content"].cast<std::string>()});
    } else {
      const auto t = h.cast<std::pair<std::string, std::string>>();
      out.push_back({t.first, t.second});
    }
  }
  return out;
}

constexpr const char* kOptionsDoc = R"doc(
Options (keywords; kappa-generate's): max_new_tokens (64), greedy, temperature
(0: greedy), top_k, top_p, min_p, repetition_penalty, seed, stop (a string or a
list), eos_ids, ignore_eos, cache_type ('f32', 'bf16', 'f16', 'int8'), logprobs
(N: each token's log-probability and the N most likely), context_length,
skip_special. Decoding is greedy unless temperature > 0, top_k, top_p, min_p or
seed asks for sampling.)doc";

}  // namespace

void register_model(py::module_& m) {
  py::class_<Generation>(m, "Generation", "The result of one generation.")
      .def_property_readonly(
          "ids", [](const Generation& g) { return g.ids; }, "The new token ids.")
      .def_property_readonly("text", [](const Generation& g) { return to_str(g.text); })
      .def_property_readonly(
          "stop_reason", [](const Generation& g) { return std::string(to_string(g.stop)); },
          "'eos', 'stop string', 'max new tokens', 'context length' or 'callback'")
      .def_property_readonly("sequence_score", [](const Generation& g) { return g.sequence_score; })
      .def_property_readonly(
          "logprobs",
          [](const Generation& g) {
            py::list out;
            for (const auto& t : g.logprobs) out.append(py::make_tuple(t.id, t.logprob, t.top));
            return out;
          },
          "[(id, log p, [(id, log p), ...top]), ...] when logprobs= was given.")
      .def_property_readonly("prefill_seconds",
                             [](const Generation& g) { return g.timing.prefill_seconds; })
      .def_property_readonly("decode_seconds",
                             [](const Generation& g) { return g.timing.decode_seconds(); })
      .def_property_readonly(
          "prefill_tokens_per_second",
          [](const Generation& g) { return g.timing.prefill_tokens_per_second(); })
      .def_property_readonly(
          "decode_tokens_per_second",
          [](const Generation& g) { return g.timing.decode_tokens_per_second(); })
      .def("__repr__", [](const Generation& g) {
        return "Generation(" + std::to_string(g.ids.size()) +
               " tokens, stop: " + to_string(g.stop) + ")";
      });

  py::class_<TextStream>(m, "TextStream",
                         "An iterator over the pieces of text of a generation (Model.stream). "
                         "close() or dropping it stops generation; .result is the Generation "
                         "once it has ended.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TextStream::next)
      .def("close", &TextStream::close)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TextStream& s, const py::args&) { s.close(); })
      .def_property_readonly("result", &TextStream::result);

  py::class_<runtime::Model>(
      m, "Model",
      R"doc(A causal language model of any architecture kappa loads (GPT-2, LLaMA, Mistral,
Qwen2/3, Gemma 2/3, Phi-3, DeepSeek-V2, mixtures of experts), with its tokenizer.
Model.load(path): a Hugging Face directory or a llama.cpp .gguf file. float32.)doc")
      .def_static(
          "load",
          [](const std::string& path, const std::string& weights, const std::string& weights_file,
             bool interleave_q4) {
            runtime::LoadOptions o;
            o.interleave_q4 = interleave_q4;
            if (weights == "bf16")
              o.weights = runtime::LoadOptions::Weights::kBf16;
            else if (weights != "as_stored")
              throw std::invalid_argument("kappa: weights must be 'as_stored' or 'bf16', got '" +
                                          weights + "'");
            o.weights_file = weights_file;
            py::gil_scoped_release release;
            return runtime::Model::load(path, o);
          },
          py::arg("path"), py::kw_only(), py::arg("weights") = "as_stored",
          py::arg("weights_file") = "", py::arg("interleave_q4") = true)
      .def_property_readonly("model_type", &runtime::Model::model_type)
      .def_property_readonly(
          "architecture", [](const runtime::Model& lm) { return std::string(lm.architecture()); })
      .def_property_readonly("vocab_size", &runtime::Model::vocab_size)
      .def_property_readonly("num_layers", &runtime::Model::num_layers)
      .def_property_readonly("context_length", &runtime::Model::context_length)
      .def_property_readonly("weight_bytes", &runtime::Model::weight_bytes)
      .def_property_readonly(
          "weights_format",
          [](const runtime::Model& lm) { return std::string(lm.weights_format()); })
      .def_property_readonly("tokenizer", &runtime::Model::tokenizer,
                             py::return_value_policy::reference_internal)
      .def_property_readonly("eos_ids",
                             [](const runtime::Model& lm) { return lm.default_options().eos_ids; })
      .def(
          "cache_bytes_per_token",
          [](const runtime::Model& lm, const std::string& f) {
            return lm.cache_bytes_per_token(cache::parse_format(f));
          },
          py::arg("format") = "native")
      .def_property_readonly("has_chat_template", &runtime::Model::has_chat_template)
      .def(
          "apply_chat_template",
          [](const runtime::Model& lm, const py::iterable& messages, bool add_generation_prompt) {
            return to_str(lm.apply_chat_template(parse_messages(messages), add_generation_prompt));
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true,
          "messages: [{'role': ..., 'content': ...}] or [(role, content)]; encode the result "
          "with add_special=False.")
      .def(
          "forward",
          [](const runtime::Model& lm, const py::object& ids, bool last_only) {
            const std::vector<TokenId> v = to_ids(ids);
            RowMatrix<float> logits;
            {
              py::gil_scoped_release release;
              logits = lm.forward(v, last_only ? LogitsFor::kLast : LogitsFor::kAll);
            }
            return to_numpy(std::move(logits));
          },
          py::arg("ids"), py::kw_only(), py::arg("last_only") = false,
          "Logits (N, N_T) of token ids (last_only: the last row, (1, N_T)).")
      .def(
          "inspect",
          [](const runtime::Model& lm, const py::object& ids, bool hidden_states, bool attentions,
             const std::optional<std::vector<Index>>& layers) {
            const std::vector<TokenId> v = to_ids(ids);
            InspectOptions o;
            o.hidden_states = hidden_states;
            o.attentions = attentions;
            if (layers) o.layers = *layers;
            Inspection<float> in;
            {
              py::gil_scoped_release release;
              in = lm.inspect(v, o);
            }
            py::dict d;
            d["logits"] = to_numpy(std::move(in.logits));
            py::list hs;
            for (auto& h : in.hidden_states) hs.append(to_numpy(std::move(h)));
            d["hidden_states"] = hs;
            py::list at;
            for (const auto& layer : in.attentions) {
              if (layer.empty()) {
                at.append(py::none());
                continue;
              }
              const auto n0 = layer.heads()[0].rows(), n1 = layer.heads()[0].cols();
              py::array_t<float> a({static_cast<py::ssize_t>(layer.size()),
                                    static_cast<py::ssize_t>(n0), static_cast<py::ssize_t>(n1)});
              float* dst = a.mutable_data();
              for (const auto& w : layer.heads())
                dst = std::copy(w.data(), w.data() + w.size(), dst);
              at.append(a);
            }
            d["attentions"] = at;
            return d;
          },
          py::arg("ids"), py::kw_only(), py::arg("hidden_states") = true,
          py::arg("attentions") = true, py::arg("layers") = py::none(),
          "Hugging Face's output_hidden_states / output_attentions: a dict with 'logits' (N, "
          "N_T), 'hidden_states' (L + 1 arrays (N, d): entry l is layer l's input, entry L the "
          "final normed states) and 'attentions' (per layer an (H, N, N) array of Z_h^-1 A_h, "
          "None for a layer not in `layers`).")
      .def(
          "generate",
          [](const runtime::Model& lm, const py::object& prompt, const py::object& on_text,
             const py::kwargs& kw) {
            const GenerateOptions opt = parse_options(lm, kw);
            const Prompt p = parse_prompt(prompt);
            TextCallback cb;
            std::exception_ptr callback_error;
            if (!on_text.is_none()) {
              // The callback runs on this thread: it takes the GIL for the call.
              cb = [&](std::string_view piece) {
                py::gil_scoped_acquire gil;
                try {
                  py::object r = on_text(to_str(piece));
                  return r.is_none() || r.cast<bool>();
                } catch (...) {
                  callback_error = std::current_exception();
                  return false;
                }
              };
            }
            Generation g;
            {
              py::gil_scoped_release release;
              g = run_generate(lm, p, opt, cb);
            }
            if (callback_error) std::rethrow_exception(callback_error);
            return g;
          },
          py::arg("prompt"), py::arg("on_text") = py::none(),
          (std::string("A continuation of prompt (text, or token ids). on_text(piece) is called "
                       "with each piece of text as soon as it is final; returning False stops.\n") +
           kOptionsDoc)
              .c_str())
      .def(
          "stream",
          [](py::object self, const py::object& prompt, const py::kwargs& kw) {
            const auto& lm = self.cast<const runtime::Model&>();
            GenerateOptions opt = parse_options(lm, kw);
            return std::make_unique<TextStream>(self, lm, parse_prompt(prompt), std::move(opt));
          },
          py::arg("prompt"),
          (std::string("An iterator over the generated text's pieces: `for piece in "
                       "model.stream(prompt, max_new_tokens=32): print(piece, end='')`. "
                       "Generation runs on a C++ thread; breaking out of the loop stops it.\n") +
           kOptionsDoc)
              .c_str())
      .def(
          "generate_ids",
          [](const runtime::Model& lm, const py::object& prompt, const py::kwargs& kw) {
            const GenerateOptions opt = parse_options(lm, kw);
            const std::vector<TokenId> ids = to_ids(prompt);
            py::gil_scoped_release release;
            return lm.generate_ids(ids, opt);
          },
          py::arg("prompt_ids"),
          (std::string("Token ids only (no text, no stop strings).\n") + kOptionsDoc).c_str())
      .def(
          "beam_search",
          [](const runtime::Model& lm, const py::object& prompt, Index num_beams,
             double length_penalty, const py::object& early_stopping, Index num_return_sequences,
             const py::kwargs& kw) {
            const GenerateOptions opt = parse_options(lm, kw);
            BeamSearchOptions b;
            b.num_beams = num_beams;
            b.length_penalty = length_penalty;
            b.num_return_sequences = num_return_sequences;
            if (py::isinstance<py::bool_>(early_stopping)) {
              b.early_stopping =
                  early_stopping.cast<bool>() ? EarlyStopping::kFirst : EarlyStopping::kHeuristic;
            } else if (py::str(early_stopping).cast<std::string>() == "never") {
              b.early_stopping = EarlyStopping::kNever;
            } else {
              throw std::invalid_argument("kappa: early_stopping must be False, True or 'never'");
            }
            b.validate();
            const Prompt p = parse_prompt(prompt);
            std::vector<TokenId> ids = p.text ? lm.tokenizer().encode(*p.text) : p.ids;
            py::gil_scoped_release release;
            return lm.beam_search(ids, opt, b);
          },
          py::arg("prompt"), py::kw_only(), py::arg("num_beams") = 4,
          py::arg("length_penalty") = 1.0, py::arg("early_stopping") = false,
          py::arg("num_return_sequences") = 1,
          "Hugging Face's num_beams: the num_return_sequences best hypotheses, best first.");
}

}  // namespace kappa::python
