"""Whole models (kappa::runtime) against the committed float64 references of
tests/data/models/*/reference (an independent PyTorch forward, never kappa):
logits, hidden states, attention weights, greedy continuations; GGUF files;
generation options, streaming and its early stop."""
import gc
import os
import threading

import numpy as np
import pytest

import kappa
from conftest import MODELS, rel_err

TOL = 1e-4  # float32 model against float64 references, relative to max(1, max|ref|)


def ref(model, name):
    return np.load(os.path.join(MODELS, model, "reference", name))


@pytest.fixture(scope="module")
def gpt2():
    return kappa.Model.load(os.path.join(MODELS, "gpt2"))


@pytest.mark.parametrize("model", ["gpt2", "llama", "mistral", "qwen2", "deepseek_v2", "gemma2",
                                   "gpt2-trained"])
def test_logits_match_reference(model):
    lm = kappa.Model.load(os.path.join(MODELS, model))
    ids = ref(model, "input_ids.npy")
    logits = lm.forward(ids)
    expected = ref(model, "logits.npy")
    assert logits.dtype == np.float32 and logits.shape == expected.shape
    assert rel_err(logits, expected) < TOL
    last = lm.forward(ids, last_only=True)
    assert last.shape == (1, expected.shape[1])
    assert rel_err(last, expected[-1:]) < TOL


@pytest.mark.parametrize("model", ["gpt2", "llama", "mistral", "deepseek_v2"])
def test_hidden_states_and_attentions_match_reference(model):
    lm = kappa.Model.load(os.path.join(MODELS, model))
    ids = ref(model, "input_ids.npy")
    n = len(ids)
    out = lm.inspect(ids)
    hs = np.stack(out["hidden_states"])
    expected_hs = ref(model, "hidden_states.npy").reshape(lm.num_layers + 1, n, -1)
    assert rel_err(hs, expected_hs) < TOL
    att = np.stack(out["attentions"])
    expected_att = ref(model, "attentions.npy").reshape(lm.num_layers, -1, n, n)
    assert att.shape == expected_att.shape
    assert rel_err(att, expected_att) < TOL
    assert rel_err(out["logits"], ref(model, "logits.npy")) < TOL
    only = lm.inspect(ids, hidden_states=False, layers=[1])
    assert only["hidden_states"] == [] and only["attentions"][0] is None
    assert rel_err(only["attentions"][1], expected_att[1]) < TOL


@pytest.mark.parametrize("model", ["gpt2", "llama", "mistral"])
def test_greedy_continuation_matches_reference(model):
    lm = kappa.Model.load(os.path.join(MODELS, model))
    ids = ref(model, "input_ids.npy")
    expected = ref(model, "greedy_ids.npy").tolist()
    g = lm.generate_ids(ids, max_new_tokens=len(expected), ignore_eos=True)
    assert g.ids == expected and g.stop_reason == "max new tokens"
    assert lm.generate(ids.tolist(), max_new_tokens=len(expected), ignore_eos=True).ids == expected


def test_gguf_file_matches_reference():
    lm = kappa.Model.load(os.path.join(MODELS, "llama-gguf", "llama-f32.gguf"))
    ids = ref("llama", "input_ids.npy")
    expected = np.load(os.path.join(MODELS, "llama-gguf", "reference", "llama-f32_logits.npy"))
    assert rel_err(lm.forward(ids), expected) < TOL
    assert lm.architecture == "Llama"


@pytest.mark.parametrize("name, apart", [("q4_0", 0.005), ("q4_k_m", 0.06)])
def test_gguf_q4_interleaved_by_default(name, apart):
    # llama.cpp's Q4_0 and Q4_K_M files: their Q4_0 / Q4_K rows interleaved
    # by eights unless asked otherwise. A prompt of more than 8 tokens reads
    # them back in rows (the same floats). Up to 8 rows take the 8-row
    # loops, which sum in another order (Q4_0: a product's outputs move by
    # an ulp, which the next product's Q8_0 rounding of its input mostly
    # absorbs; measured 0.027 of 27 here) and for Q4_K quantize X to Q8_K,
    # one scale per 256 (measured 0.037 of the largest logit here; the C++
    # tests check that the loops run and bound their error).
    path = os.path.join(MODELS, "llama-gguf", "llama-256-%s.gguf" % name)
    il = kappa.Model.load(path)
    rows = kappa.Model.load(path, interleave_q4=False)
    ids = ref("llama-256", "input_ids.npy")
    assert len(ids) > 8
    assert np.array_equal(il.forward(ids), rows.forward(ids))
    few_il, few_rows = il.forward(ids[:8]), rows.forward(ids[:8])
    assert np.abs(few_il - few_rows).max() <= apart * np.abs(few_rows).max()
    assert il.weight_bytes == rows.weight_bytes


def test_model_properties_and_errors(gpt2):
    assert gpt2.model_type == "gpt2" and gpt2.architecture == "Gpt2"
    assert gpt2.vocab_size == 297 and gpt2.num_layers == 2 and gpt2.context_length == 32
    assert gpt2.cache_bytes_per_token("bf16") * 2 == gpt2.cache_bytes_per_token()
    assert isinstance(gpt2.tokenizer, kappa.Tokenizer)
    with pytest.raises(kappa.RangeError, match="297"):
        gpt2.forward([1, 297])
    with pytest.raises(kappa.RangeError):
        gpt2.forward(list(range(40)))  # longer than the learned positions
    with pytest.raises(ValueError, match="sampling parameters"):
        gpt2.generate("the", greedy=True, top_k=5)
    with pytest.raises(TypeError, match="unknown generation option 'max_tokens'"):
        gpt2.generate("the", max_tokens=3)
    with pytest.raises(kappa.FormatError):
        kappa.Model.load(os.path.join(MODELS, "does-not-exist"))


@pytest.fixture(scope="module")
def trained():
    return kappa.Model.load(os.path.join(MODELS, "gpt2-trained"))


def test_sampling_is_seeded_and_options_apply(trained):
    a = trained.generate("And God said", max_new_tokens=12, temperature=0.8, top_p=0.9, seed=5)
    b = trained.generate("And God said", max_new_tokens=12, temperature=0.8, top_p=0.9, seed=5)
    c = trained.generate("And God said", max_new_tokens=12, temperature=0.8, top_p=0.9, seed=6)
    assert a.ids == b.ids and a.text == b.text and a.ids != c.ids
    g = trained.generate("And God said", max_new_tokens=8, logprobs=3, ignore_eos=True,
                         cache_type="bf16")
    assert len(g.logprobs) == len(g.ids) == 8
    tok_id, lp, top = g.logprobs[0]
    assert tok_id == g.ids[0] and lp <= 0 and len(top) == 3 and top[0][1] >= top[1][1]
    beams = trained.beam_search("And God said", num_beams=3, num_return_sequences=2,
                                max_new_tokens=6)
    assert len(beams) == 2 and beams[0].sequence_score >= beams[1].sequence_score


def test_streaming_yields_the_generated_text(trained):
    opts = dict(max_new_tokens=20, ignore_eos=True)
    pieces = list(trained.stream("And God said", **opts))
    assert len(pieces) > 1 and all(isinstance(p, str) for p in pieces)
    g = trained.generate("And God said", **opts)
    assert "".join(pieces) == g.text
    seen = []
    g2 = trained.generate("And God said", on_text=seen.append, **opts)
    assert "".join(seen) == g2.text == g.text


def test_streaming_stops_early(trained):
    s = trained.stream("And God said", max_new_tokens=30, ignore_eos=True)
    first = [next(s), next(s)]
    s.close()
    assert s.result is not None and s.result.stop_reason == "callback"
    assert len(s.result.ids) < 30 and "".join(first) in s.result.text
    with pytest.raises(StopIteration):
        # anything left in the queue, then the end
        for _ in range(100):
            next(s)
    with trained.stream("And God said", max_new_tokens=30, ignore_eos=True) as s2:
        for i, _ in enumerate(s2):
            if i == 1:
                break
    assert s2.result.stop_reason == "callback"
    # dropped without being read: the worker stops and is joined
    threads = threading.active_count()
    for _ in range(5):
        trained.stream("And God said", max_new_tokens=30)
    gc.collect()
    assert threading.active_count() <= threads


def test_streaming_raises_generation_errors(gpt2):
    with pytest.raises(kappa.RangeError):
        list(gpt2.stream([1, 2, 297], max_new_tokens=3))


def test_callback_errors_propagate(trained):
    def on_text(piece):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        trained.generate("And God said", on_text=on_text, max_new_tokens=5, ignore_eos=True)
    seen = []
    g = trained.generate("And God said", on_text=lambda p: seen.append(p) or len(seen) < 2,
                         max_new_tokens=20, ignore_eos=True)
    assert g.stop_reason == "callback" and len(seen) == 2


def test_chat_template():
    lm = kappa.Model.load(os.path.join(MODELS, "gpt2"))
    if lm.has_chat_template:
        text = lm.apply_chat_template([{"role": "user", "content": "hi"}])
        assert "hi" in text
    else:
        with pytest.raises(kappa.FormatError):
            lm.apply_chat_template([("user", "hi")])
