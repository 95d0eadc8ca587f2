#!/usr/bin/python3
"""Trains tiny SentencePiece models and writes the reference ids and
decodings that tests/tokenize/sentencepiece_model_test.cpp compares against.

Needs Debian's sentencepiece 0.1.97 Python binding (apt-get install
python3-sentencepiece); run it with the system python3:

    /usr/bin/python3 tests/reference/make_sentencepiece_models.py

Writes into tests/data/tokenize/sentencepiece/:
  <name>.model          the trained ModelProto (each < 60 KB)
  golden.json           {"sentencepiece": version, "inputs": [{"name", "text"
                        or "hex"}], "models": {<name>: {"ids": [[...]],
                        "decoded": [text, or null when equal to the input],
                        "pieces": n, "id_to_piece", "scores", "types" (0
                        normal or user-defined, 1 unknown, 2 control, 3
                        unused, 4 byte), ...}}}
Training text: the files of tests/data/tokenize/corpus (our own text).
Deterministic: training is single-threaded with a fixed seed, random
strings come from random.Random(25).
"""

import json
import os
import random
import sys

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "data", "tokenize", "corpus")
OUT = os.path.join(ROOT, "tests", "data", "tokenize", "sentencepiece")

TRAIN_FILES = ["english.txt", "arabic.txt", "cjk.txt", "code.txt", "combining.txt",
               "emoji.txt", "numbers.txt", "specials.txt", "whitespace.txt"]

# A small rule set of our own for "unigram_user" (nmt_nfkc's charsmap alone is
# 237 KB): keys of several characters, keys that prefix longer keys (the
# longest match wins), replacements that are spaces or empty.
RULES = [
    ("A", "a"), ("B", "b"), ("F", "f"), ("O", "o"), ("T", "t"), ("X", "x"),
    ("\t", " "), ("\u3000", " "), ("\u00a0", " "), ("\u200b", ""), ("\r", ""),
    ("\ufb01", "fi"), ("\u2460", "1"), ("\uff21", "a"), ("\u00df", "ss"),
    ("e\u0301", "\u00e9"), ("a\u0308", "\u00e4"), ("\u2026", "..."),
    ("<<", "\u00ab"), ("<<<", "\u22d8"), (">>", "\u00bb"), ("--", "\u2014"),
    ("\u0661", "1"), ("\u0662", "2"), ("\u3042", "\u30a2"),
]
RULES_TSV = os.path.join(OUT, "rules.tmp.tsv")


# name -> spm_train options (besides input / model_prefix)
MODELS = {
    # T5-like: Unigram, nmt_nfkc, default whitespace handling, no byte fallback.
    "unigram_nfkc": dict(model_type="unigram", vocab_size=400,
                         normalization_rule_name="nmt_nfkc"),
    # Unigram with byte fallback, no normalization, whitespace kept as it is.
    "unigram_bytes": dict(model_type="unigram", vocab_size=800, byte_fallback=True,
                          normalization_rule_name="identity", remove_extra_whitespaces=False,
                          character_coverage=0.98),
    # Llama-2-like: BPE, byte fallback, identity, dummy prefix, spaces kept.
    "bpe_llama": dict(model_type="bpe", vocab_size=900, byte_fallback=True,
                      normalization_rule_name="identity", add_dummy_prefix=True,
                      remove_extra_whitespaces=False, split_digits=True,
                      allow_whitespace_only_pieces=True, character_coverage=0.98),
    # BPE without byte fallback: unknown characters (fused runs of <unk>).
    "bpe_unk": dict(model_type="bpe", vocab_size=500, normalization_rule_name="identity",
                    remove_extra_whitespaces=False, character_coverage=0.98),
    # Unigram with user-defined symbols, an extra control symbol and <pad>.
    "unigram_user": dict(model_type="unigram", vocab_size=450,
                         normalization_rule_tsv=RULES_TSV,
                         user_defined_symbols=["<sep>", "@@", "fox", "\u2581\u2581"],
                         control_symbols=["<mask>"], pad_id=3, unk_surface="<?>"),
}


def write_rules():
    with open(RULES_TSV, "w", encoding="utf-8") as fh:
        for src, dst in RULES:
            hexs = lambda t: " ".join("%X" % ord(c) for c in t)
            fh.write("%s\t%s\n" % (hexs(src), hexs(dst)))


def train_text():
    parts = []
    for f in TRAIN_FILES:
        with open(os.path.join(CORPUS, f), encoding="utf-8") as fh:
            parts.append(fh.read())
    return "\n".join(parts)


STRESS = [
    " ", "  ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u200b", "\u2581", "\u2581\u2581",
    "a", "b", "e", "t", "the", "The", "fox", "dog", "over", "quick", "THE", "ſ",
    "é", "e\u0301", "n\u0303", "\u0301", "\u0308", "ﬁ", "①", "Ａ", "½", "\u1100\u1161",
    "日", "本", "語", "漢字", "中文", "한국어", "ひらがな", "カタカナ",
    "مرحبا", "العربية", "\u05e9\u05dc\u05d5\u05dd",
    "😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤\ufe0f", "🦀",
    "<s>", "</s>", "<unk>", "<pad>", "<sep>", "<mask>", "@@", "<0x41>", "<",
    "0", "1", "2024", "3.14", "-", "_", ".", ",", "'", '"', "(", ")", "{", "}", "#", "$",
    "\x00", "\x01", "\x7f", "\ufffd", "\U0010ffff", "\ue000", "ꙮ", "𝔘", "Ω", "Ω",
]


def random_strings(rng, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        s = "".join(rng.choice(STRESS) for _ in range(k))
        if rng.random() < 0.05:  # a very long word
            s += "".join(rng.choice("abcdefghij") for _ in range(rng.randint(40, 120)))
        out.append(s)
    return out


def inputs():
    items = []
    for f in sorted(os.listdir(CORPUS)):
        with open(os.path.join(CORPUS, f), "rb") as fh:
            data = fh.read()
        try:
            items.append({"name": "corpus/" + f, "text": data.decode("utf-8")})
        except UnicodeDecodeError:
            items.append({"name": "corpus/" + f, "hex": data.hex()})
    fixed = ["", " ", "    ", "\t", "\n\n", "\u2581", " a", "a ", " a  b ", "a\u2581b",
             "<s>", "<s>hello</s>", " <s> ", "<unk>", "<sep>x<sep>", "@@fox@@", "Fox fox FOX",
             "\u2581\u2581x", "x\u2581\u2581", "\u3000\u3000a"]
    for i, s in enumerate(fixed):
        items.append({"name": "fixed/%d" % i, "text": s})
    for i, s in enumerate(random_strings(random.Random(25), 300)):
        items.append({"name": "random/%d" % i, "text": s})
    # invalid UTF-8 bytes inside text
    for i, b in enumerate([b"\xff", b"a\x80b", b"\xe6\x97", b"\xed\xa0\x80", b"\xc0\xaf",
                           b"hello \xf0\x9f\x98 world", b"\xf4\x90\x80\x80"]):
        items.append({"name": "bytes/%d" % i, "hex": b.hex()})
    return items


def main():
    os.makedirs(OUT, exist_ok=True)
    text_path = os.path.join(OUT, "train.tmp")
    with open(text_path, "w", encoding="utf-8") as fh:
        fh.write(train_text())
    write_rules()
    golden = {"sentencepiece": spm.__version__, "inputs": inputs(), "models": {}}
    try:
        for name, opts in MODELS.items():
            prefix = os.path.join(OUT, name)
            spm.SentencePieceTrainer.train(input=text_path, model_prefix=prefix,
                                           num_threads=1, hard_vocab_limit=False,
                                           minloglevel=2, **opts)
            os.remove(prefix + ".vocab")
            size = os.path.getsize(prefix + ".model")
            # nmt_nfkc's charsmap alone is 237 KB: that model is the exception.
            assert size < 60 * 1024 or opts.get("normalization_rule_name") == "nmt_nfkc", (name, size)
            sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
            ids, decoded = [], []
            for item in golden["inputs"]:
                data = item["text"] if "text" in item else bytes.fromhex(item["hex"])
                e = sp.EncodeAsIds(data)
                ids.append(e)
                d = sp.DecodeIds(e)
                decoded.append(None if d == item.get("text") else d)  # null: the input
            golden["models"][name] = {
                "options": {k: v for k, v in opts.items()},
                "pieces": sp.GetPieceSize(),
                "unk_id": sp.unk_id(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
                "pad_id": sp.pad_id(),
                "id_to_piece": [sp.IdToPiece(i) for i in range(sp.GetPieceSize())],
                "scores": [sp.GetScore(i) for i in range(sp.GetPieceSize())],
                "types": [1 if sp.IsUnknown(i) else 2 if sp.IsControl(i) else
                          3 if sp.IsUnused(i) else 4 if sp.IsByte(i) else 0
                          for i in range(sp.GetPieceSize())],
                "ids": ids, "decoded": decoded,
            }
            print(name, size, "bytes,", sp.GetPieceSize(), "pieces", file=sys.stderr)
    finally:
        os.remove(text_path)
        os.remove(RULES_TSV)
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main()
