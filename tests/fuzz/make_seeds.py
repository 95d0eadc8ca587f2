#!/usr/bin/env python3
"""Writes the committed seed corpora of kappa's fuzzers (tests/fuzz/corpus).

Deterministic; run from anywhere: python3 tests/fuzz/make_seeds.py
[--vocab DIR]. The loaders also get the first 400 tokens of the real
r50k_base.tiktoken and GPT-2 files as seeds, read from the committed
tests/data/tokenize/vocab/vocab.tar.xz (or from DIR, e.g. <build>/vocab,
which cmake extracts it into).
"""
import argparse
import base64
import json
import os
import struct
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEXT_DIR = os.path.join(ROOT, "tests", "data", "tokenize", "corpus")
VOCAB_ARCHIVE = os.path.join(ROOT, "tests", "data", "tokenize", "vocab", "vocab.tar.xz")


def vocab_reader(vocab_dir):
    """read(name) -> bytes of a vocabulary file (e.g. "gpt2/vocab.bpe"), from
    vocab_dir if given, else from the committed archive."""
    if vocab_dir:
        def read(name):
            with open(os.path.join(vocab_dir, name), "rb") as f:
                return f.read()
        return read
    with tarfile.open(VOCAB_ARCHIVE, "r:xz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return lambda name: files[name]


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- text: UTF-8 edge cases and the tokenize test corpus --------------------
EDGES = {
    "ascii": b"Hello, world! It's 2024; they'll we've I'm you'd 12345.",
    "contractions": b"IT'S It\xe2\x80\x99s 's 'S 'LL 'Ve don't\n",
    "whitespace": b"a  b\t\tc \r\n\r\n  \n\x0b\x0c\xc2\xa0\xe3\x80\x80\xe2\x80\xa8 end  ",
    "overlong": b"\xc0\xaf \xe0\x80\xaf \xf0\x80\x80\xaf \xc1\xbf",
    "surrogates": b"\xed\xa0\x80 \xed\xbf\xbf \xed\x9f\xbf",
    "limits": b"\xf4\x8f\xbf\xbf \xf4\x90\x80\x80 \xf5\x80\x80\x80 \xff\xfe",
    "truncated": b"\xe4\xb8 \xf0\x9f\x98 \xc3",
    "mixed": "café naïve Ωmega 中文字 العربية 🙂👍🏽 e\u0301 ǅungla".encode(),
    "numbers": b"1 22 333 4444 55555 \xd9\xa1\xd9\xa2\xd9\xa3 \xe2\x85\xa0 3.14e-10",
    "code": b"for (int i = 0; i < n; ++i) { x[i] = y[i] /* c */; }\n// done\r\n",
    "special": b"<|endoftext|>hello<|endoftext|> <|endoftext|",
}


def text_seeds():
    seeds = dict(EDGES)
    for f in sorted(os.listdir(TEXT_DIR)):
        with open(os.path.join(TEXT_DIR, f), "rb") as fh:
            seeds["corpus_" + f.split(".")[0]] = fh.read()[:2048]
    return seeds


# ---- a small byte-level BPE vocabulary ---------------------------------------
def gpt2_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


MERGES = [(b"h", b"e"), (b"l", b"l"), (b"he", b"ll"), (b"hell", b"o"), (b" ", b"w"),
          (b"o", b"r"), (b" w", b"or"), (b"l", b"d"), (b" wor", b"ld"), (b" ", b"t"),
          (b" t", b"he"), (b"i", b"n"), (b"in", b"g"), (b"\xc3", b"\xa9"), (b"\n", b"\n")]


def small_vocab():
    tokens = [bytes([b]) for b in range(256)]
    for a, b in MERGES:
        tokens.append(a + b)
    return tokens


def tiktoken_file(tokens, eol="\n"):
    return "".join(f"{base64.b64encode(t).decode()} {i}{eol}" for i, t in enumerate(tokens))


def gpt2_files(tokens, merges, specials=()):
    alpha = gpt2_alphabet()
    enc = lambda t: "".join(alpha[b] for b in t)
    encoder = {enc(t): i for i, t in enumerate(tokens)}
    for k, s in enumerate(specials):
        encoder[s] = len(tokens) + k
    vocab = "#version: 0.2\n" + "".join(f"{enc(a)} {enc(b)}\n" for a, b in merges)
    return json.dumps(encoder, ensure_ascii=False), vocab


# ---- GGUF metadata sections (gguf_load) --------------------------------------
GGUF_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_value_end(b, at, t):
    """The offset just past a value of GGUF type t that starts at b[at]."""
    if t == 8:
        return at + 8 + struct.unpack_from("<Q", b, at)[0]
    if t == 9:
        element, n = struct.unpack_from("<IQ", b, at)
        at += 12
        for _ in range(n):
            at = gguf_value_end(b, at, element)
        return at
    return at + GGUF_SCALAR_BYTES[t]


def gguf_metadata(path):
    """[(key, type, value bytes as stored)] of a GGUF file's metadata."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3, path
    n_kv = struct.unpack_from("<Q", b, 16)[0]
    at, out = 24, []
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", b, at)[0]
        key = b[at + 8:at + 8 + n].decode()
        t = struct.unpack_from("<I", b, at + 8 + n)[0]
        start = at + 12 + n
        at = gguf_value_end(b, start, t)
        out.append((key, t, b[start:at]))
    return out


def gguf_array_head(value, n):
    """An array value (as stored) cut to its first n elements."""
    element, count = struct.unpack_from("<IQ", value, 0)
    at = 12
    for _ in range(min(n, count)):
        at = gguf_value_end(value, at, element)
    return struct.pack("<IQ", element, min(n, count)) + value[12:at]


def gguf_section(kv):
    """The metadata section as a GGUF file stores it: the count, then the pairs."""
    out = struct.pack("<Q", len(kv))
    for key, t, value in kv:
        k = key.encode()
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + value
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=None,
                    help="directory of the vocabulary files (default: the committed archive)")
    args = ap.parse_args()

    for name, data in text_seeds().items():
        write("utf8_pretokenize", name, data)
        write("bpe", name, data)

    tokens = small_vocab()
    write("tiktoken_load", "small", tiktoken_file(tokens))
    write("tiktoken_load", "small_crlf", tiktoken_file(tokens, "\r\n"))
    write("tiktoken_load", "bytes_only", tiktoken_file(tokens[:256]))
    write("tiktoken_load", "shuffled", "".join(
        f"{base64.b64encode(t).decode()} {i}\n" for i, t in reversed(list(enumerate(tokens)))))
    write("tiktoken_load", "bad_rank", tiktoken_file(tokens[:3]) + "aGk= x\n")

    enc, voc = gpt2_files(tokens, MERGES, ["<|endoftext|>"])
    write("gpt2_load", "small", enc + "\0" + voc)
    enc, voc = gpt2_files(tokens[:256], [])
    write("gpt2_load", "bytes_only", enc + "\0" + voc)
    write("gpt2_load", "escapes", '{"\\u0120t": 0, "\\ud83d\\ude00": 1, "a\\"b": 2}\0#version: 0.2\n\\u0120 t\n')

    read = vocab_reader(args.vocab)
    write("tiktoken_load", "r50k_head", b"".join(read("r50k_base.tiktoken").splitlines(True)[:400]))
    encoder = {k: v for k, v in json.loads(read("gpt2/encoder.json").decode("utf-8")).items() if v < 400}
    merges = read("gpt2/vocab.bpe").decode("utf-8").splitlines(True)[:1 + 400 - 256]
    write("gpt2_load", "gpt2_head", json.dumps(encoder, ensure_ascii=False) + "\0" + "".join(merges))

    # char_word: byte K, byte vocab size, corpus \0 text \0 specials
    for k, (K, n, corpus, text, specials) in enumerate([
            (2, 40, b"the cat sat on the mat", b"the bat", b""),
            (3, 200, EDGES["mixed"], b"caf\xc3\xa9 x", b"<s>\n</s>"),
            (1, 5, b"<s> hello_world, <s> again!", b"hello <s>", b"<s>"),
            (4, 255, EDGES["overlong"] + EDGES["contractions"], EDGES["truncated"], b"\xc3\n\n"),
    ]):
        write("char_word", f"seed{k}", bytes([K - 1, n]) + corpus + b"\0" + text + b"\0" + specials)

    # bpe_train: byte vocab_size - 256, byte min_pair_count - 1, corpus
    seeds = text_seeds()
    for k, (extra, mpc, name) in enumerate([(40, 1, "ascii"), (100, 0, "mixed"), (255, 1, "corpus_english"),
                                          (10, 2, "corpus_longword"), (60, 0, "corpus_code")]):
        write("bpe_train", f"seed{k}", bytes([extra, mpc]) + seeds[name][:1024])

    # npy
    def npy(descr, shape, data, fortran=False, version=1):
        shape_s = "(" + "".join(f"{s}, " for s in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"
        if len(shape) > 1:
            shape_s = "(" + ", ".join(str(s) for s in shape) + ")"
        header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_s}, }}"
        pre = 10 if version == 1 else 12
        header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
        length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
        return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + data

    write("npy", "f4_2x3", npy("<f4", (2, 3), struct.pack("<6f", 1, 2, 3, 4, 5, 6)))
    write("npy", "f8_3", npy("<f8", (3,), struct.pack("<3d", 0.5, -1.0, float("nan"))))
    write("npy", "f8_be", npy(">f8", (2, 1), struct.pack(">2d", 1e15, -0.0)))
    write("npy", "i8_fortran", npy("<i8", (2, 2), struct.pack("<4q", 1, 2, 3, 4), fortran=True))
    write("npy", "i4_3d_fortran", npy("<i4", (2, 2, 2), struct.pack("<8i", *range(8)), fortran=True))
    write("npy", "scalar", npy("<f8", (), struct.pack("<d", 3.0)))
    write("npy", "empty", npy("<f4", (0, 3), b""))
    write("npy", "v2", npy("<f4", (1, 2), struct.pack("<2f", 7, 8), version=2))
    write("npy", "v3", npy("<f4", (2,), struct.pack("<2f", 7, 8), version=3))
    write("npy", "truncated", npy("<f8", (4, 4), struct.pack("<2d", 1, 2)))

    # safetensors: u64 header length, JSON header (space padded), data
    def safetensors(tensors, metadata=None, pad_to=8):
        header, data = {}, b""
        if metadata is not None:
            header["__metadata__"] = metadata
        for name, (dtype, shape, raw) in tensors.items():
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * ((pad_to - (8 + len(text)) % pad_to) % pad_to)
        return struct.pack("<Q", len(text)) + text + data

    write("safetensors", "f32_matrix", safetensors(
        {"w": ("F32", (2, 3), struct.pack("<6f", 1, 2, 3, 4, 5, 6))}, {"format": "pt"}))
    write("safetensors", "mixed", safetensors({
        "a.bias": ("F64", (3,), struct.pack("<3d", 0.5, -2, float("inf"))),
        "b.half": ("F16", (2, 2), struct.pack("<4H", 0x3C00, 0xC000, 0x7C00, 0x0001)),
        "c.bf16": ("BF16", (1, 2), struct.pack("<2H", 0x3F80, 0x7FC0)),
        "d.ids": ("I64", (2,), struct.pack("<2q", -1, 2**40)),
        "e.mask": ("BOOL", (), b"\x01"),
        "f.u8": ("U8", (2, 2, 1), b"\x00\x01\xfe\xff"),
        "g.i32": ("I32", (0, 4), b""),
    }))
    write("safetensors", "unaligned", safetensors(
        {"x": ("F32", (1,), struct.pack("<f", 3.5))}, pad_to=3))
    write("safetensors", "empty", safetensors({}))
    write("safetensors", "f8", safetensors({"q": ("F8_E4M3", (4,), b"\x00\x38\x7f\xff")}))

    # safetensors_index: a model.safetensors.index.json for the directory
    # safetensors_index_fuzz.cpp makes (shard 1 holds t0..t63, shard 2
    # u0..u3; link.safetensors and sub/up.safetensors link to shard 1;
    # fifo.safetensors is a FIFO, dir.safetensors a directory).
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"

    def index(weight_map, metadata=None, **kw):
        doc = {"metadata": metadata if metadata is not None else {"total_size": 272}}
        doc["weight_map"] = weight_map
        return json.dumps(doc, **kw)

    write("safetensors_index", "valid", index(
        {**{f"t{i}": s1 for i in range(8)}, **{f"u{i}": s2 for i in range(4)}}, indent=2))
    # One shard spelled 64 ways (and through both links): opened once.
    spellings = {}
    for i in range(64):
        name = [s1, "link.safetensors", "sub/up.safetensors", "sub/./up.safetensors"][i % 4]
        spellings[f"t{i}"] = "." + "/" * (1 + i // 16) + "./" * (i % 16 // 4) + name
    write("safetensors_index", "spellings", index(spellings, separators=(",", ":")))
    write("safetensors_index", "escaped_spellings",
          '{"weight_map": {"t0": "\\u002e/' + s1 + '", "t1": "./\\u006cink.safetensors", '
          '"t2": "sub\\/up.safetensors", "u0": "' + s2 + '"}}')
    write("safetensors_index", "deep_metadata",
          '{"metadata": ' + "[" * 200 + "]" * 200 + ', "weight_map": {"t0": "' + s1 + '"}}')
    write("safetensors_index", "deep_weight_map",
          '{"weight_map": {"t0": ' + '{"a":' * 130 + "1" + "}" * 130 + "}}")
    write("safetensors_index", "fifo_shard", index({"t0": "fifo.safetensors"}))
    write("safetensors_index", "dir_shard", index({"t0": "dir.safetensors", "t1": s1}))
    write("safetensors_index", "escapes", index({"t0": "../" + s1, "t1": "/etc/hostname",
                                                 "t2": "", "t3": "sub/../../" + s1}))
    write("safetensors_index", "missing", index({"t0": s1, "t9": s2, "x": "nope.safetensors"}))
    write("safetensors_index", "duplicate_keys", '{"weight_map": {"t0": "' + s1 + '", "t0": "' + s2 + '"}}')
    write("safetensors_index", "not_object", '[{"weight_map": {}}]')

    # ---- hf_json: the first byte picks the reader (even: tokenizer.json,
    # odd: config.json); the tiny reference models' files.
    models = os.path.join(ROOT, "tests", "data", "models")
    for d in ["llama", "qwen2", "gpt2", "deepseek_v2", "mistral"]:
        with open(os.path.join(models, d, "tokenizer.json"), "rb") as f:
            write("hf_json", "tokenizer_" + d, b"\x00" + f.read())
    for d in ["llama", "mistral", "qwen2", "llama3-scaled", "llama-dynamic", "deepseek_v2", "gpt2"]:
        with open(os.path.join(models, d, "config.json"), "rb") as f:
            write("hf_json", "config_" + d, b"\x01" + f.read())
    # Nesting: kappa::parse_json rejects JSON deeper than 128 levels before
    # parsing (nothing may recurse through a million brackets). Deeper than
    # the limit in several places, exactly at it (parses, then rejected by
    # the loader), unclosed, and brackets inside strings (which do not count).
    with open(os.path.join(models, "gpt2", "tokenizer.json"), encoding="utf-8") as f:
        gpt2 = json.load(f)
    with open(os.path.join(models, "llama", "config.json"), encoding="utf-8") as f:
        llama_config = json.load(f)

    def nested(depth, leaf="1"):
        """depth levels of alternating arrays and objects around leaf."""
        opened = "".join("[" if k % 2 == 0 else '{"k":' for k in range(depth))
        closed = "".join("]" if k % 2 == 0 else "}" for k in reversed(range(depth)))
        return opened + leaf + closed

    def with_placeholder(obj, edit, text):
        o = json.loads(json.dumps(obj))
        edit(o)
        return json.dumps(o).replace('"@DEEP@"', text)

    def put(path):
        def edit(o):
            for k in path[:-1]:
                o = o[k]
            o[path[-1]] = "@DEEP@"
        return edit

    # SentencePiece-style BPE (Llama-2's layout and Metaspace): a small
    # vocabulary with all 256 byte tokens (the committed ones of
    # tests/data/tokenize/sp are larger than the fuzzer's MAX_LEN).
    sp_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        sp_vocab["<0x%02X>" % b] = len(sp_vocab)
    for piece in ["\u2581", "H", "e", "l", "o", "w", "r", "d", "a", "b", "ll", "llo", "\u2581w",
                  "\u2581wo", "He", "Hello", "\u2581\u2581"]:
        sp_vocab[piece] = len(sp_vocab)
    sp_merges = ["l l", "ll o", "\u2581 w", "\u2581w o", "H e", "He llo", "\u2581 \u2581"]
    sp_added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    sp_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    sp_llama = {
        "version": "1.0", "added_tokens": sp_added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": sp_decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True,
                  "byte_fallback": True, "vocab": sp_vocab, "merges": sp_merges}}
    write("hf_json", "sp_llama", b"\x00" + json.dumps(sp_llama).encode())
    sp_meta = json.loads(json.dumps(sp_llama))
    sp_meta["normalizer"] = None
    sp_meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                                "prepend_scheme": "first", "split": True}
    sp_meta["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                          "split": True}
    sp_meta["model"]["merges"] = [m.split(" ") for m in sp_merges]
    sp_meta["model"]["ignore_merges"] = True
    write("hf_json", "sp_metaspace", b"\x00" + json.dumps(sp_meta).encode())
    write("hf_json", "deep_normalizer",
          b"\x00" + with_placeholder(gpt2, put(["normalizer"]), nested(200)).encode())
    write("hf_json", "deep_at_limit",  # 127 + the root object = 128: parses
          b"\x00" + with_placeholder(gpt2, put(["normalizer"]), nested(127)).encode())
    write("hf_json", "deep_pre_tokenizer_pattern",
          b"\x00" + with_placeholder(gpt2, put(["pre_tokenizer", "pattern"]), nested(300)).encode())
    write("hf_json", "deep_vocab_value",
          b"\x00" + with_placeholder(gpt2, put(["model", "vocab", "ab"]), nested(129)).encode())
    write("hf_json", "deep_unclosed", b"\x00" + b"[" * 16000)
    write("hf_json", "deep_brackets_in_string",
          b"\x00" + with_placeholder(gpt2, put(["added_tokens", 0, "content"]),
                                      '"' + "[{" * 1000 + '\\"]"').encode())
    write("hf_json", "deep_config_rope_scaling",
          b"\x01" + with_placeholder(llama_config, put(["rope_scaling"]), nested(200)).encode())

    # ---- hf_load: the first byte picks the checkpoint (hf_load_fuzz.cpp's
    # kModels order), the rest is config.json: each model's own config, and
    # configs whose sizes or parameters disagree with the weights.
    models = ["gpt2", "llama", "mistral", "qwen2", "deepseek_v2", "bert", "transformer"]
    configs = {}
    for i, m in enumerate(models):
        with open(os.path.join(ROOT, "tests", "data", "models", m, "config.json"), "rb") as f:
            configs[m] = json.loads(f.read())
        write("hf_load", "config_" + m, bytes([i]) + json.dumps(configs[m]).encode())

    def edited(m, **changes):
        c = dict(configs[m])
        c.update(changes)
        return bytes([models.index(m)]) + json.dumps(c).encode()
    write("hf_load", "gpt2_many_layers", edited("gpt2", n_layer=2 ** 40))
    write("hf_load", "gpt2_wide", edited("gpt2", n_embd=40000, n_head=8))
    write("hf_load", "llama_ffn", edited("llama", intermediate_size=10 ** 8))
    write("hf_load", "llama_heads", edited("llama", head_dim=2 ** 40))
    write("hf_load", "llama_eps", edited("llama", rms_norm_eps=-1))
    write("hf_load", "llama_yarn", edited("llama", rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "attention_factor": 1e30}))
    write("hf_load", "deepseek_overflow", edited(
        "deepseek_v2", num_attention_heads=2 ** 40, qk_nope_head_dim=2 ** 40))
    write("hf_load", "deepseek_mscale", edited("deepseek_v2", rope_scaling={
        "type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": -1.0,
        "original_max_position_embeddings": 64}))
    write("hf_load", "bert_ffn", edited("bert", intermediate_size=10 ** 8))
    write("hf_load", "transformer_ffn", edited("transformer", dim_feedforward=10 ** 8))
    write("hf_load", "vocab_above_int64", edited("qwen2", vocab_size=2 ** 64 - 1))

    # ---- gguf_load: the first byte picks the model (gguf_load_fuzz.cpp's
    # kModels order), the rest is a GGUF metadata section (the key-value
    # count, then the pairs): each model's own, and metadata whose sizes or
    # tokenizer keys disagree with the tensors.
    gguf_models = ["llama-q8_0", "gpt2-f32", "qwen2-f32", "qwen3-f32", "mixtral-q8_0",
                   "deepseek_v2-f32"]
    metas = {m: gguf_metadata(os.path.join(ROOT, "tests", "data", "models", "llama-gguf",
                                           m + ".gguf")) for m in gguf_models}
    for i, m in enumerate(gguf_models):
        write("gguf_load", "metadata_" + m, bytes([i]) + gguf_section(metas[m]))

    def gguf_edited(m, changes, drop=()):
        kv = [(k, t, v) for k, t, v in metas[m] if k not in drop]
        for key, (t, v) in changes.items():
            kv = [(k, t0, v0) for k, t0, v0 in kv if k != key] + [(key, t, v)]
        return bytes([gguf_models.index(m)]) + gguf_section(kv)
    u32 = lambda x: (4, struct.pack("<I", x))
    u64 = lambda x: (10, struct.pack("<Q", x))
    write("gguf_load", "llama_many_blocks", gguf_edited("llama-q8_0", {"llama.block_count": u64(2 ** 40)}))
    write("gguf_load", "llama_wide", gguf_edited("llama-q8_0", {"llama.embedding_length": u32(2 ** 31)}))
    write("gguf_load", "llama_no_heads", gguf_edited("llama-q8_0", {"llama.attention.head_count": u32(0)}))
    write("gguf_load", "llama_rope_dims", gguf_edited("llama-q8_0", {"llama.rope.dimension_count": u32(2 ** 30)}))
    write("gguf_load", "llama_key_length", gguf_edited("llama-q8_0", {"llama.attention.key_length": u32(2 ** 31)}))
    write("gguf_load", "llama_context", gguf_edited("llama-q8_0", {"llama.context_length": u64(2 ** 62)}))
    write("gguf_load", "gpt2_ffn", gguf_edited("gpt2-f32", {"gpt2.feed_forward_length": u32(10 ** 8)}))
    write("gguf_load", "gpt2_no_token_types", gguf_edited("gpt2-f32", {}, drop=("tokenizer.ggml.token_type",)))
    write("gguf_load", "gpt2_bos_outside", gguf_edited("gpt2-f32", {"tokenizer.ggml.bos_token_id": u32(2 ** 31)}))
    write("gguf_load", "mixtral_experts", gguf_edited("mixtral-q8_0", {"llama.expert_count": u32(2 ** 31)}))
    write("gguf_load", "deepseek_lora", gguf_edited("deepseek_v2-f32", {"deepseek2.attention.kv_lora_rank": u32(2 ** 31)}))
    write("gguf_load", "deepseek_dense_blocks", gguf_edited("deepseek_v2-f32", {"deepseek2.leading_dense_block_count": u64(2 ** 40)}))
    # A SentencePiece-style vocabulary (tokenizer.ggml.model "llama": scores
    # and token types) on the llama model: the vocabulary file's first 298
    # tokens, as many as the model's embedding has rows.
    spm = dict((k, (t, v)) for k, t, v in gguf_metadata(os.path.join(
        ROOT, "tests", "data", "models", "llama-gguf", "spm-bpe_llama-vocab.gguf")))
    spm_keys = {k: (t, gguf_array_head(v, 298) if t == 9 else v) for k, (t, v) in spm.items()
                if k.startswith("tokenizer.")}
    write("gguf_load", "llama_spm_vocab", gguf_edited(
        "llama-q8_0", spm_keys, drop=[k for k, _, _ in metas["llama-q8_0"] if k.startswith("tokenizer.")]))


if __name__ == "__main__":
    main()
