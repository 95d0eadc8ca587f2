#!/usr/bin/env node
// Encode throughput of the reference tokenizers on the same bytes as
// bench_tokenize, side by side with kappa's figures.
//
//   cmake --build --preset bench --target bench_tokenize tokenize-peers
//   node benchmarks/tokenize_peers.cjs [path/to/bench_tokenize] [--reps N] [--build DIR]
//
// DIR is the build directory (default: the one holding the bench_tokenize
// given, else build/bench): the peers are the npm packages that its target
// tokenize-peers installs in DIR/tokenize-peers, the vocabulary files those
// that cmake extracts into DIR/vocab.
// Peers:
//   tiktoken  @dqbd/tiktoken: tiktoken's Rust core compiled to WebAssembly,
//             encode_ordinary() on gpt2, cl100k_base, o200k_base;
//   HF        @anush008/tokenizers: Hugging Face tokenizers' native Rust
//             binding, with a GPT-2 tokenizer.json built in memory from
//             encoder.json + vocab.bpe (as tests/tokenize/peer/peer.cjs
//             does). Its BPE keeps a word cache. Also the SentencePiece-style
//             tokenizers: tests/data/tokenize/sp/llama and, with
//             KAPPA_LLAMA2_TOKENIZER_DIR set, Llama-2's own tokenizer.json.
// Inputs: tests/data/tokenize/bench/{english,cjk}.txt repeated (whole
// copies) to at least 1 MiB, exactly as bench_tokenize builds them.
// Each figure is the median MB/s (10^6 bytes) of N timed runs (default 5)
// after one warm-up run; everything runs on one thread (HF's parallelism off).
// If the path to bench_tokenize is given, it is run with the same number of
// repetitions and its medians are printed in the same table.
"use strict";
process.env.RAYON_NUM_THREADS = "1";
process.env.TOKENIZERS_PARALLELISM = "false";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");

const root = path.resolve(__dirname, "..");

const args = process.argv.slice(2);
let reps = 5;
let benchBinary = null;
let buildDir = null;
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--reps") reps = Number(args[++i]);
  else if (args[i] === "--build") buildDir = path.resolve(args[++i]);
  else benchBinary = args[i];
}
// <build>/benchmarks/bench_tokenize -> <build>
if (buildDir === null) {
  buildDir = benchBinary ? path.resolve(path.dirname(benchBinary), "..") : path.join(root, "build", "bench");
}
const peerDir = path.join(buildDir, "tokenize-peers");
const vocabDir = path.join(buildDir, "vocab");
if (!fs.existsSync(path.join(peerDir, "node_modules"))) {
  console.error(`no tokenize peers in ${peerDir}: cmake --build ${buildDir} --target tokenize-peers`);
  process.exit(1);
}
const req = (m) => require(require.resolve(m, { paths: [peerDir] }));
const { hfTokenizerJson } = require(path.join(root, "tests", "tokenize", "peer", "peer.cjs"));

function input(which) {
  const one = fs.readFileSync(path.join(root, "tests", "data", "tokenize", "bench", `${which}.txt`));
  const copies = [];
  let size = 0;
  while (size < 1 << 20) { copies.push(one); size += one.length; }
  const bytes = Buffer.concat(copies);
  return { text: bytes.toString("utf8"), bytes: bytes.length };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

async function measure(fn, bytes) {
  await fn();  // warm-up
  const rates = [];
  for (let r = 0; r < reps; ++r) {
    const t0 = process.hrtime.bigint();
    let runs = 0;
    let elapsed = 0;
    do {  // at least 0.5 s per repetition
      await fn();
      ++runs;
      elapsed = Number(process.hrtime.bigint() - t0) * 1e-9;
    } while (elapsed < 0.5);
    rates.push((bytes * runs) / elapsed / 1e6);
  }
  return median(rates);
}

async function main() {
  const inputs = { english: input("english"), cjk: input("cjk") };
  const rows = [];  // [encoding, text, tiktoken, hf, kappa]
  const { get_encoding } = req("@dqbd/tiktoken");
  const { Tokenizer } = req("@anush008/tokenizers");
  const hf = Tokenizer.fromString(hfTokenizerJson(
    fs.readFileSync(path.join(vocabDir, "gpt2", "encoder.json"), "utf8"),
    fs.readFileSync(path.join(vocabDir, "gpt2", "vocab.bpe"), "utf8")));
  const encodings = [["gpt2", "Gpt2"], ["cl100k_base", "Cl100k"], ["o200k_base", "O200k"]];
  for (const [enc, benchName] of encodings) {
    const tt = get_encoding(enc);
    for (const which of ["english", "cjk"]) {
      const { text, bytes } = inputs[which];
      const ttRate = await measure(() => tt.encode_ordinary(text), bytes);
      let hfRate = null;
      if (enc === "gpt2") {
        const n = (await hf.encode(text)).getIds().length;
        const m = tt.encode_ordinary(text).length;
        if (n !== m) console.error(`note: HF gives ${n} tokens, tiktoken ${m} on ${which}`);
        hfRate = await measure(() => hf.encode(text), bytes);
      }
      rows.push({ enc, which, benchName: `BM_Encode_${benchName}_${which === "cjk" ? "Cjk" : "English"}`, ttRate, hfRate });
    }
    tt.free();
  }
  // SentencePiece-style BPE: HF alone (tiktoken has none), on the committed
  // synthetic Llama-2-layout tokenizer and on Llama-2's own tokenizer.json
  // when KAPPA_LLAMA2_TOKENIZER_DIR names its directory (as for bench_tokenize).
  const sp = [["sp synthetic", "SpSynthetic", path.join(root, "tests", "data", "tokenize", "sp", "llama", "tokenizer.json")]];
  if (process.env.KAPPA_LLAMA2_TOKENIZER_DIR)
    sp.push(["llama-2", "Llama2", path.join(process.env.KAPPA_LLAMA2_TOKENIZER_DIR, "tokenizer.json")]);
  for (const [enc, benchName, file] of sp) {
    const tok = Tokenizer.fromFile(file);
    for (const which of ["english", "cjk"]) {
      const { text, bytes } = inputs[which];
      const hfRate = await measure(() => tok.encode(text), bytes);
      rows.push({ enc, which, benchName: `BM_Encode_${benchName}_${which === "cjk" ? "Cjk" : "English"}`, ttRate: null, hfRate });
    }
  }
  let kappa = {};
  if (benchBinary) {
    const out = execFileSync(benchBinary, ["--benchmark_filter=BM_Encode_", `--benchmark_repetitions=${reps}`,
      "--benchmark_report_aggregates_only=true", "--benchmark_format=json"], { maxBuffer: 1 << 26 });
    for (const b of JSON.parse(out).benchmarks) {
      if (b.aggregate_name === "median") kappa[b.run_name] = b["MB/s"];
    }
  }
  const f = (x) => (x == null ? "-" : x.toFixed(1));
  console.log(`median MB/s over ${reps} runs, 1 thread, inputs >= 1 MiB`);
  console.log("| encoding | text | kappa | tiktoken (WASM) | HF tokenizers (native) | kappa / fastest peer |");
  console.log("|---|---|---:|---:|---:|---:|");
  for (const r of rows) {
    const k = kappa[r.benchName];
    const best = Math.max(r.ttRate ?? 0, r.hfRate ?? 0);
    console.log(`| ${r.enc} | ${r.which} | ${f(k)} | ${f(r.ttRate)} | ${f(r.hfRate)} | ${k ? (k / best).toFixed(2) + "x" : "-"} |`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
