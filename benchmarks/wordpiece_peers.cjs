#!/usr/bin/env node
// WordPiece encode throughput of Hugging Face tokenizers' native binding
// (@anush008/tokenizers) on the same bytes as bench_tokenize's
// BM_Encode_WordPiece_{English,Cjk}, side by side with kappa's figures.
//
//   node benchmarks/wordpiece_peers.cjs <path/to/bench_tokenize> [--reps N] [--peers DIR]
//
// DIR holds the node_modules of tests/tokenize/peer/package.json (the target
// tokenize-peers installs them in <build>/tokenize-peers; default: that
// directory beside the binary's build). The tokenizer is bert-base-uncased's
// vocab.txt as a tokenizer.json (tests/tokenize/peer/wordpiece_peer.cjs
// tokenizerJson, uncased); one thread; median MB/s (10^6 bytes) of N runs
// after one warm-up.
"use strict";
process.env.RAYON_NUM_THREADS = "1";
process.env.TOKENIZERS_PARALLELISM = "false";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const root = path.resolve(__dirname, "..");
const args = process.argv.slice(2);
let reps = 5, bench = null, peers = null;
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--reps") reps = Number(args[++i]);
  else if (args[i] === "--peers") peers = path.resolve(args[++i]);
  else bench = args[i];
}
if (peers === null) peers = bench ? path.resolve(path.dirname(bench), "..", "tokenize-peers") : path.join(root, "build", "bench", "tokenize-peers");
const { Tokenizer } = require(require.resolve("@anush008/tokenizers", { paths: [peers] }));
const { tokenizerJson } = require(path.join(root, "tests", "tokenize", "peer", "wordpiece_peer.cjs"));

function input(which) {
  const one = fs.readFileSync(path.join(root, "tests", "data", "tokenize", "bench", `${which}.txt`));
  const copies = [];
  let size = 0;
  while (size < 1 << 20) { copies.push(one); size += one.length; }
  return Buffer.concat(copies).toString("utf8");
}

async function main() {
  const vocab = fs.readFileSync(path.join(root, "tests/data/tokenize/wordpiece/bert-base-uncased/vocab.txt"), "utf8")
    .split("\n").filter((l, i, a) => i < a.length - 1 || l !== "");
  const hf = Tokenizer.fromString(tokenizerJson(vocab, { strip_accents: null, lowercase: true }));
  const kappa = {};
  if (bench) {
    const out = execFileSync(bench, ["--benchmark_filter=WordPiece", `--benchmark_repetitions=${reps}`,
      "--benchmark_report_aggregates_only=true", "--benchmark_format=json"], { encoding: "utf8", maxBuffer: 1 << 26 });
    for (const b of JSON.parse(out).benchmarks)
      if (b.aggregate_name === "median") kappa[b.run_name] = b["MB/s"];
  }
  console.log("| text | kappa encode MB/s | kappa normalize+split MB/s | HF tokenizers MB/s | kappa / HF |");
  console.log("|---|---:|---:|---:|---:|");
  for (const which of ["english", "cjk"]) {
    const text = input(which);
    const bytes = Buffer.byteLength(text, "utf8");
    await hf.encode(text);
    const rates = [];
    for (let r = 0; r < reps; ++r) {
      const t0 = process.hrtime.bigint();
      await hf.encode(text);
      rates.push(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
    }
    rates.sort((a, b) => a - b);
    const hfRate = rates[Math.floor(rates.length / 2)];
    const W = which === "cjk" ? "Cjk" : "English";
    const k = kappa[`BM_Encode_WordPiece_${W}`], s = kappa[`BM_Split_WordPiece_${W}`];
    const f = (x) => (x === undefined ? "-" : x.toFixed(1));
    console.log(`| ${which} | ${f(k)} | ${f(s)} | ${f(hfRate)} | ${k ? (k / hfRate).toFixed(2) + "x" : "-"} |`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
