// tests/tokenize/peer/added_peer.cjs - Hugging Face tokenizers' ids for
// added tokens with every flag (lstrip, rstrip, single_word, normalized), on
// six kinds of tokenizer.json: byte-level without a normalizer (the tiny
// GPT-2's), byte-level with NFC (the tiny Qwen2's), SentencePiece-style BPE
// with Llama-2's Prepend + Replace normalizer, and with a Metaspace
// pre-tokenizer (tests/data/tokenize/sp), WordPiece (the tiny BERT's
// vocab.txt with BERT's uncased pipeline, built here) and Unigram (the
// synthetic T5 layout of tests/data/tokenize/unigram: Precompiled charsmap,
// WhitespaceSplit + Metaspace).
//
//   KAPPA_TOKENIZE_PEERS=<dir with node_modules> node added_peer.cjs <kappa source dir>
//
// writes tests/data/tokenize/added/<layout>/tokenizer.json (the base file with
// the added tokens below appended) and tests/data/tokenize/added/peer_ids.json
// (per input: the ids with and without the post-processor's tokens, and
// decode(ids, false)). The inputs are fixed strings written around the tokens'
// edge cases and random strings over fragments of them.
"use strict";
const fs = require("fs");
const path = require("path");

const peersDir = process.env.KAPPA_TOKENIZE_PEERS || __dirname;
const { Tokenizer } = require(require.resolve("@anush008/tokenizers", { paths: [peersDir] }));

const src = process.argv[2];
if (!src) {
  console.error("usage: node added_peer.cjs <kappa source dir>");
  process.exit(2);
}
const BASES = {
  bytelevel: "tests/data/models/gpt2/tokenizer.json",
  nfc: "tests/data/models/qwen2/tokenizer.json",
  sp_prepend: "tests/data/tokenize/sp/llama/tokenizer.json",
  sp_metaspace: "tests/data/tokenize/sp/metaspace_first/tokenizer.json",
  wordpiece: "tests/data/models/bert/vocab.txt",
  unigram: "tests/data/tokenize/unigram/t5/tokenizer.json",
};

// BERT's uncased tokenizer.json (as transformers' BertConverter writes it)
// around a vocab.txt.
function wordpieceJson(vocabTxt) {
  const vocab = {};
  vocabTxt.split("\n").filter((l) => l.length > 0).forEach((t, i) => { vocab[t] = i; });
  const special = (t) => ({ id: vocab[t], content: t, single_word: false, lstrip: false,
                            rstrip: false, normalized: false, special: true });
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map(special),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true,
                  strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: { type: "BertProcessing", sep: ["[SEP]", vocab["[SEP]"]],
                      cls: ["[CLS]", vocab["[CLS]"]] },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
             max_input_chars_per_word: 100, vocab },
  };
}
// [content, special, lstrip, rstrip, single_word, normalized]
const ADDED = [
  ["<mask>", true, true, false, false, false],
  ["<R>", true, false, true, false, false],
  ["<LR>", false, true, true, false, false],
  ["cat", false, false, false, true, false],
  ["dog", false, false, false, true, true],
  ["<N>", false, false, false, false, true],
  ["Ab", false, false, false, false, true],
  ["\u00e9t\u00e9", false, false, false, false, true],
  ["x y", false, false, false, false, true],
  ["<N>x", false, false, false, false, false],
  ["sun", false, true, true, true, false],
];

// A deterministic generator (xorshift32) so the file is the same each run.
let state = 0x2545f491;
function rand(n) {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state % n;
}

const FIXED = [
  "", " ", "  ", "\t\n", "a <mask> b", "a  \t<mask>b", "<mask>", " <mask>", "<mask><mask>",
  "x\u3000<mask>", "<R>  x", "<R>\n\ny", "<R>", "a <R> <mask> b", "  <LR>  ", "a<LR>b",
  "cat", "the cat sat", "concat", "cats", "cat_", "_cat", "cat!", "!cat", "catcat", "cat cat",
  "\u24b6cat", "\u00b2cat", "cat\u00b2", "1cat", "cat9", "\u00e4 cat", "\u0301cat", "\u200dcat",
  "\u0915cat", "\u00a0cat\u00a0", "dog", "dogs", "hot dog", "dog-dog", "Dog", "<N>", "a<N>b",
  " <N>x", "<N>x", "<N>xy", "Ab", "xAb", " Ab", "Ab Ab", "AbAb", "\u00e9t\u00e9",
  "e\u0301te\u0301", "un \u00e9t\u00e9 chaud", "x y", "x  y", "x\ty", "sun", "a sun b",
  "sunny", "  sun  ", "sun sun", "cat <mask> dog <R> sun", "<s>cat</s>", "caf\u00e9 <mask>",
];
const FRAGMENTS = [
  "<mask>", "<R>", "<LR>", "cat", "dog", "<N>", "Ab", "\u00e9t\u00e9", "e\u0301", "x y", "sun",
  " ", "  ", "\t", "\n", "a", "x", "_", "1", "\u00b2", "\u24b6", "\u0301", "\u3000", "\u00a0",
  "\u4e2d", "\ud83d\ude00", "!", "<", ">", "N", "y", "<s>",
];
const cases = FIXED.map((text, k) => ({ name: `fixed_${k}`, text }));
for (let k = 0; k < 300; ++k) {
  let text = "";
  const n = 1 + rand(8);
  for (let i = 0; i < n; ++i) text += FRAGMENTS[rand(FRAGMENTS.length)];
  cases.push({ name: `random_${k}`, text });
}

async function main() {
  const out = { note: "", layouts: Object.keys(BASES), cases: [] };
  out.note =
    "Hugging Face tokenizers (@anush008/tokenizers) on tests/data/tokenize/added/<layout>/" +
    "tokenizer.json: ids = encode(text) with the post-processor's tokens, plain = without, " +
    "decode = decode(plain, false). Made by tests/tokenize/peer/added_peer.cjs.";
  const toks = {};
  for (const [layout, base] of Object.entries(BASES)) {
    const raw = fs.readFileSync(path.join(src, base), "utf8");
    const t = base.endsWith("vocab.txt") ? wordpieceJson(raw) : JSON.parse(raw);
    let next = Array.isArray(t.model.vocab) ? t.model.vocab.length : Object.keys(t.model.vocab).length;
    for (const a of t.added_tokens) next = Math.max(next, a.id + 1);
    // A content that is already a model token keeps that token's id, as
    // Hugging Face assigns it (it ignores another id in the file).
    const modelId = (content) => {
      if (Array.isArray(t.model.vocab)) {
        const k = t.model.vocab.findIndex((p) => p[0] === content);
        return k < 0 ? undefined : k;
      }
      return t.model.vocab[content];
    };
    for (const [content, special, lstrip, rstrip, single_word, normalized] of ADDED) {
      const known = modelId(content);
      const id = known === undefined ? next++ : known;
      t.added_tokens.push({ id, content, single_word, lstrip, rstrip, normalized, special });
    }
    const dir = path.join(src, "tests/data/tokenize/added", layout);
    fs.mkdirSync(dir, { recursive: true });
    const text = JSON.stringify(t);
    fs.writeFileSync(path.join(dir, "tokenizer.json"), text);
    toks[layout] = Tokenizer.fromString(text);
  }
  for (const c of cases) {
    const entry = { name: c.name, text: c.text };
    for (const layout of Object.keys(BASES)) {
      const t = toks[layout];
      const ids = Array.from((await t.encode(c.text)).getIds());
      const plain = Array.from((await t.encode(c.text, null, { addSpecialTokens: false })).getIds());
      entry[layout] = { ids, plain, decode: await t.decode(plain, false) };
    }
    out.cases.push(entry);
  }
  fs.writeFileSync(path.join(src, "tests/data/tokenize/added/peer_ids.json"),
                   JSON.stringify(out, null, 0) + "\n");
  console.log(`${out.cases.length} inputs x ${Object.keys(BASES).length} layouts`);
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
