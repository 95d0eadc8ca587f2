#!/usr/bin/env python3
"""Writes the synthetic SentencePiece-style BPE tokenizers of this folder.

A small BPE vocabulary is trained here (plain Python, no dependency) over the
characters of tests/data/tokenize/corpus, SentencePiece's way: spaces are
"\u2581", every word starts with one, merges never cross a "\u2581" in the
middle of a piece. The vocabulary is laid out as Llama-2's: <unk> 0, <s> 1,
</s> 2, <0x00>..<0xFF> 3..258, then the characters seen at least twice (the
others are absent and take the byte fallback or <unk>), then the merged
pieces in merge order, then one piece no merge makes ("\u2581xyzzy", for
ignore_merges). Then one tokenizer.json per layout (see README.md):

  llama/            normalizer Sequence[Prepend, Replace], pre_tokenizer null,
                    merges as "a b" strings, byte_fallback, fuse_unk,
                    decoder [Replace, ByteFallback, Fuse, Strip], <s> template,
                    plus tokenizer_config.json (add_bos_token)
  metaspace_first/  Metaspace(prepend_scheme first, split false), merges as
                    pairs, the same decoder
  metaspace_split/  Metaspace(always, split true), ignore_merges,
                    decoder [ByteFallback, Metaspace(always)]
  metaspace_never/  Metaspace(never, split true), no byte fallback, fused
                    <unk>, decoder Metaspace(never)
  unk_unfused/      the llama layout without byte fallback or fuse_unk, and
                    no decoder (Hugging Face joins tokens with " ")

Run from anywhere; the output is deterministic.
"""
import collections
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
SP = "\u2581"
MERGES = 400


def training_words():
    words = collections.Counter()
    chars = collections.Counter()
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith(".txt") or name == "longword.txt":
            continue
        with open(os.path.join(CORPUS, name), encoding="utf-8") as f:
            text = f.read()
        for line in text.split("\n"):
            for w in line.split(" "):
                if w:
                    words[SP + w] += 1
                    chars.update(SP + w)
    return words, chars


def train():
    words, chars = training_words()
    alphabet = sorted(c for c, n in chars.items() if n >= 2)
    known = set(alphabet)
    seqs = {w: [c for c in w] for w in words if all(c in known for c in w)}
    merges = []
    for _ in range(MERGES):
        pairs = collections.Counter()
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                if b == SP:
                    continue  # never a piece with "\u2581" inside
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return alphabet, merges


def vocabulary(alphabet, merges):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for c in alphabet:
        vocab.setdefault(c, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab.setdefault(SP + "xyzzy", len(vocab))
    return vocab


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def llama(vocab, merges):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in merges]},
    }


def metaspace(base, scheme, split):
    t = copy.deepcopy(base)
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme,
                          "split": split}
    t["model"]["merges"] = [list(m.split(" ")) for m in t["model"]["merges"]]
    return t


def write(name, t, config=None):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False, indent=1)
        f.write("\n")
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
            f.write("\n")


def main():
    alphabet, merges = train()
    vocab = vocabulary(alphabet, merges)
    base = llama(vocab, merges)
    write("llama", base, {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                          "eos_token": "</s>", "unk_token": "<unk>",
                          "tokenizer_class": "LlamaTokenizer", "legacy": True})
    write("metaspace_first", metaspace(base, "first", False))
    t = metaspace(base, "always", True)
    t["model"]["ignore_merges"] = True
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True}]}
    write("metaspace_split", t)
    t = metaspace(base, "never", True)
    t["model"]["byte_fallback"] = False
    t["decoder"] = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "never", "split": True}
    write("metaspace_never", t)
    t = copy.deepcopy(base)
    t["model"]["byte_fallback"] = False
    t["model"]["fuse_unk"] = False
    t["decoder"] = None
    write("unk_unfused", t)
    print("%d characters, %d merges, %d tokens" % (len(alphabet), len(merges), len(vocab)))


if __name__ == "__main__":
    main()
