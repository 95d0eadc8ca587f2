"""Tokenizers against the ids committed in tests/data: tiktoken's (npm
@dqbd/tiktoken) and Hugging Face tokenizers' ids in
tests/data/tokenize/peer_ids.json, and a model directory's tokens.json."""
import json
import os
import tarfile

import numpy as np
import pytest

import kappa
from conftest import DATA, MODELS

TOK = os.path.join(DATA, "tokenize")
PEER = json.load(open(os.path.join(TOK, "peer_ids.json"), encoding="utf-8"))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab")
    with tarfile.open(os.path.join(TOK, "vocab", "vocab.tar.xz")) as tar:
        tar.extractall(out)
    return str(out)


def case_text(case):
    if "text" in case:
        return case["text"].encode("utf-8", "surrogatepass")
    with open(os.path.join(TOK, case["file"]), "rb") as f:
        return f.read()


def check_cases(tok, key, limit=None):
    checked = 0
    for case in PEER["cases"][:limit] if limit else PEER["cases"]:
        if key not in case["ids"]:
            continue
        ids = tok.encode(case_text(case), allow_special=case["specials"] == "all-special")
        assert ids == case["ids"][key], case["name"]
        checked += 1
    return checked


def test_gpt2_files_give_tiktoken_ids(vocab):
    tok = kappa.BpeTokenizer.from_gpt2_files(os.path.join(vocab, "gpt2", "encoder.json"),
                                             os.path.join(vocab, "gpt2", "vocab.bpe"))
    assert tok.vocab_size == 50257
    assert check_cases(tok, "gpt2") > 1000
    assert tok.encode("hello world") == [31373, 995]
    assert tok.decode([31373, 995]) == "hello world"
    assert tok.token(995) == b" world"


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_tiktoken_rank_files(vocab, encoding):
    tok = kappa.BpeTokenizer.from_tiktoken_file(os.path.join(vocab, encoding + ".tiktoken"), encoding)
    assert check_cases(tok, encoding, limit=300) > 250
    if encoding == "cl100k_base":
        assert tok.encode("hello world") == [15339, 1917]
        assert tok.encode("a<|endoftext|>", allow_special=True) == [64, 100257]
        assert tok.encode("a<|endoftext|>") != [64, 100257]


def test_bpe_round_trips_bytes_and_range_error(vocab):
    tok = kappa.BpeTokenizer.from_tiktoken_file(os.path.join(vocab, "r50k_base.tiktoken"), "r50k_base")
    data = bytes(range(256)) + "é日本🙂".encode()
    assert tok.decode_bytes(tok.encode(data)) == data
    with pytest.raises(kappa.RangeError, match="50257"):
        tok.decode([50257])


def test_hf_directory_matches_tokens_json():
    ref = json.load(open(os.path.join(MODELS, "gpt2", "reference", "tokens.json"), encoding="utf-8"))
    tok = kappa.Tokenizer.from_directory(os.path.join(MODELS, "gpt2"))
    assert len(ref["texts"]) == len(ref["ids"]) > 3
    for text, ids in zip(ref["texts"], ref["ids"]):
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == text
    assert tok.vocab_size == 297


def test_hf_tokenizer_on_gpt2_files_matches_hf_peer(tmp_path, vocab):
    # Hugging Face tokenizers' ids on GPT-2's own files ('hf:gpt2'): a
    # directory with vocab.json + merges.txt as the hub has them.
    import shutil
    d = tmp_path / "gpt2"
    d.mkdir()
    shutil.copy(os.path.join(vocab, "gpt2", "encoder.json"), d / "vocab.json")
    shutil.copy(os.path.join(vocab, "gpt2", "vocab.bpe"), d / "merges.txt")
    (d / "config.json").write_text('{"model_type": "gpt2"}')
    tok = kappa.Tokenizer.from_directory(str(d))
    checked = with_special = 0
    for case in PEER["cases"][:200]:
        if b"<|endoftext|>" in case_text(case):
            # the peer's tokenizer.json declares <|endoftext|> an added token;
            # vocab.json + merges.txt alone do not
            with_special += 1
            continue
        if "hf:gpt2" in case["ids"] and case["specials"] == "ordinary":
            assert tok.encode(case_text(case), add_special=False) == case["ids"]["hf:gpt2"], case["name"]
            checked += 1
    assert checked > 150 and with_special < 5


def test_char_and_word_tokenizers():
    chars = kappa.CharTokenizer(["a", "b", "ab", "c"])
    assert chars.vocab_size == 5 and chars.token(0) == "<unk>"
    assert chars.encode("abcab?") == [3, 4, 3, 0]
    assert chars.decode([3, 4]) == "abc"
    corpus = "the cat sat on the mat. the cat!"
    built = kappa.CharTokenizer.from_corpus(corpus, vocab_size=20)
    assert built.decode(built.encode("the cat")) == "the cat"
    words = kappa.WordTokenizer(corpus, min_frequency=2)
    ids = words.encode("the cat sat")
    assert ids[0] == words.find("the") and ids[1] == words.find("cat") and ids[2] == 0
    assert words.decode(words.encode("the cat . the")) == "the cat <unk> the"
    every = kappa.WordTokenizer(corpus)
    assert every.decode(every.encode("the  cat.the")) == "the cat . the"
    with pytest.raises(kappa.RangeError):
        words.decode([words.vocab_size])
    with pytest.raises(ValueError, match="duplicate"):
        kappa.CharTokenizer(["a", "a"])
    assert words.encode("the") == words.encode(np.str_("the"))
