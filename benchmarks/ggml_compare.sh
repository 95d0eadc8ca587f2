#!/usr/bin/env bash
# benchmarks/ggml_compare.sh - llama.cpp's llama-bench on a GGUF file, built from
# the llama.cpp commit our GGUF test files were made with, and (optionally) our
# own generate command run alternately on the same file.
#
#   benchmarks/ggml_compare.sh MODEL.gguf [extra llama-bench arguments]
#
# What it does:
#   1. `npm pack node-llama-cpp@3.22.1` into $KAPPA_GGML_CACHE (never into this
#      tree), unpack its llama/gitRelease.bundle, clone it to
#      $KAPPA_GGML_CACHE/llama.cpp and check out the pinned commit
#      ($LLAMA_CPP_COMMIT; the bundle's only commit). Skipped when that clone
#      exists and is at the commit.
#   2. Builds llama-bench and llama-quantize there (CPU only, Release,
#      -DGGML_NATIVE=ON with AMX turned off, see GGML_C_FLAGS; no tests, examples,
#      server or OpenSSL; ~6 min on 2 cores the first time, then a no-op).
#   3. For each of $ROUNDS rounds: llama-bench -m MODEL.gguf -p $PROMPT -n $GEN
#      -t $THREADS -r $REPS (markdown table: pp<PROMPT> is prompt processing,
#      tg<GEN> generation, column t/s = tokens per second, mean +- sd of the
#      repetitions), then our command if $KAPPA_GENERATE_CMD is set.
#
# Variables (defaults in brackets):
#   KAPPA_GGML_CACHE    where npm's tarball, the clone and its build go
#                       [${XDG_CACHE_HOME:-$HOME/.cache}/kappa-ggml]
#   NODE_LLAMA_CPP      the npm package carrying the bundle [node-llama-cpp@3.22.1]
#   LLAMA_CPP_COMMIT    the commit to build [de3ff815ea7d559ee917f063901b8986f038abc6]
#   BUILD_JOBS          parallel compile jobs [2]
#   GGML_C_FLAGS        C/C++ flags added to -march=native [-mno-amx-tile
#                       -mno-amx-int8 -mno-amx-bf16]: CPUs that report AMX under
#                       a hypervisor that has not enabled its state (this
#                       machine, Firecracker) trap on ggml's AMX kernels
#                       (SIGILL, tilezero in tinygemm_kernel_amx); our code uses
#                       no AMX either. Set it empty where AMX works.
#   PROMPT, GEN         llama-bench -p / -n [128 / 64]
#   THREADS             llama-bench -t, a comma list [1,2]
#   REPS                llama-bench -r [5]
#   ROUNDS              how many times to alternate llama-bench and our command [1]
#   KAPPA_GENERATE_CMD  our own command, run through `bash -c` after each
#                       llama-bench run, with these exported to it: MODEL (the
#                       GGUF path), PROMPT, GEN, THREADS. Unset: only llama-bench
#                       runs. Example (examples/generate, from any Release build
#                       with the examples, prints prefill and decode tokens/s on
#                       stderr; this prompt is about $PROMPT tokens, not exactly;
#                       the model must allow PROMPT + GEN positions):
#     KAPPA_GENERATE_CMD='for t in ${THREADS//,/ }; do
#       ./build/dev/examples/generate --model "$MODEL" --greedy --threads $t \
#         --max-new-tokens $GEN --prompt "$(printf "the %.0s" $(seq $PROMPT))" >/dev/null; done'
#
# Needs npm (the registry), git, cmake, a C/C++ compiler. llama.cpp is MIT-licensed.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit $(( $# < 1 ? 2 : 0 ))
fi
MODEL=$(realpath "$1")
shift
[[ -f "$MODEL" ]] || { echo "ggml_compare.sh: no such file: $MODEL" >&2; exit 2; }

CACHE=${KAPPA_GGML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kappa-ggml}
PKG=${NODE_LLAMA_CPP:-node-llama-cpp@3.22.1}
COMMIT=${LLAMA_CPP_COMMIT:-de3ff815ea7d559ee917f063901b8986f038abc6}
BUILD_JOBS=${BUILD_JOBS:-2}
GGML_C_FLAGS=${GGML_C_FLAGS--mno-amx-tile -mno-amx-int8 -mno-amx-bf16}
PROMPT=${PROMPT:-128}
GEN=${GEN:-64}
THREADS=${THREADS:-1,2}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-1}
SRC=$CACHE/llama.cpp
BUILD=$SRC/build

mkdir -p "$CACHE"
if [[ "$(git -C "$SRC" rev-parse HEAD 2>/dev/null || true)" != "$COMMIT" ]]; then
    if [[ ! -d "$SRC/.git" ]]; then
        echo "== fetching $PKG into $CACHE" >&2
        tgz=$(cd "$CACHE" && npm pack --silent "$PKG" | tail -n 1)
        tar xzf "$CACHE/$tgz" -C "$CACHE" package/llama/gitRelease.bundle
        git -c advice.detachedHead=false clone -q "$CACHE/package/llama/gitRelease.bundle" "$SRC"
    fi
    git -C "$SRC" -c advice.detachedHead=false checkout -q "$COMMIT"
fi
echo "== llama.cpp $(git -C "$SRC" rev-parse HEAD) in $SRC" >&2

# (re)configured every time: a few seconds, and a changed GGML_C_FLAGS takes effect
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF "-DCMAKE_C_FLAGS=$GGML_C_FLAGS" "-DCMAKE_CXX_FLAGS=$GGML_C_FLAGS" >&2
cmake --build "$BUILD" -j "$BUILD_JOBS" --target llama-bench llama-quantize >&2

export MODEL PROMPT GEN THREADS
for ((round = 1; round <= ROUNDS; round++)); do
    echo "== round $round / $ROUNDS: llama-bench $(basename "$MODEL") (pp = prompt processing, tg = generation; t/s = tokens per second)"
    "$BUILD/bin/llama-bench" -m "$MODEL" -p "$PROMPT" -n "$GEN" -t "$THREADS" -r "$REPS" -o md "$@"
    if [[ -n "${KAPPA_GENERATE_CMD:-}" ]]; then
        echo "== round $round / $ROUNDS: ours: $KAPPA_GENERATE_CMD"
        bash -c "$KAPPA_GENERATE_CMD" || echo "ggml_compare.sh: our command exited with status $?" >&2
    fi
done
