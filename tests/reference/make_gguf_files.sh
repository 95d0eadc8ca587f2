#!/usr/bin/env bash
# Regenerates tests/data/io/gguf/ with ggml's own code (tests/data/io/gguf/README.md).
# Needs npm (the registry) and gcc; never run by the build or the tests.
#   bash tests/reference/make_gguf_files.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../data/io/gguf"
pkg="@node-llama-cpp/linux-x64@3.22.1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
lib="$work/package/bins/linux-x64"
gcc -std=c11 -O1 -Wall -Wextra -o "$work/ggml_reference" "$here/ggml_reference.c" \
  -L"$lib" -l:libggml-base.so -Wl,-rpath,"$lib" -lm
mkdir -p "$out/blocks"
"$work/ggml_reference" "$out"
echo "wrote $(du -sh "$out" | cut -f1) into $out"
