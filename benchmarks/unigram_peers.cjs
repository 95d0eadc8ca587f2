#!/usr/bin/env node
// Unigram encode throughput of Hugging Face tokenizers' native binding
// (@anush008/tokenizers) on the same bytes as bench_tokenize's
// BM_Encode_Unigram_{English,Cjk}, side by side with kappa's figures.
//
//   node benchmarks/unigram_peers.cjs <path/to/bench_tokenize> [--reps N] [--peers DIR]
//
// DIR holds the node_modules of tests/tokenize/peer/package.json (the target
// tokenize-peers installs them in <build>/tokenize-peers; default: that
// directory beside the binary's build). The tokenizer is
// tests/data/tokenize/unigram/t5/tokenizer.json (synthetic pieces, a
// Precompiled charsmap, WhitespaceSplit + Metaspace); one thread; median MB/s
// (10^6 bytes) of N runs after one warm-up.
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

function input(which) {
  const one = fs.readFileSync(path.join(root, "tests", "data", "tokenize", "bench", `${which}.txt`));
  const copies = [];
  let size = 0;
  while (size < 1 << 20) { copies.push(one); size += one.length; }
  return Buffer.concat(copies).toString("utf8");
}

async function main() {
  const hf = Tokenizer.fromString(fs.readFileSync(path.join(root, "tests/data/tokenize/unigram/t5/tokenizer.json"), "utf8"));
  const kappa = {};
  if (bench) {
    const out = execFileSync(bench, ["--benchmark_filter=Unigram", `--benchmark_repetitions=${reps}`,
      "--benchmark_report_aggregates_only=true", "--benchmark_format=json"], { encoding: "utf8", maxBuffer: 1 << 26 });
    for (const b of JSON.parse(out).benchmarks)
      if (b.aggregate_name === "median") kappa[b.run_name] = b["MB/s"];
  }
  console.log("| text | kappa encode MB/s | kappa normalize MB/s | HF tokenizers MB/s | kappa / HF |");
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
    const k = kappa[`BM_Encode_Unigram_${W}`], s = kappa[`BM_Normalize_Unigram_${W}`];
    const f = (x) => (x === undefined ? "-" : x.toFixed(1));
    console.log(`| ${which} | ${f(k)} | ${f(s)} | ${f(hfRate)} | ${k ? (k / hfRate).toFixed(2) + "x" : "-"} |`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
