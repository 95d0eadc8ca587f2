#!/usr/bin/env bash
# benchmarks/ggml_compare.sh - llama.cpp's llama-bench and our generate command
# on the same GGUF files, alternated, with the ratios kappa / llama.cpp.
#
#   benchmarks/ggml_compare.sh MODEL.gguf [MODEL2.gguf ...]
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
#   3. For each of $ROUNDS rounds, each file and each thread count of $THREADS:
#      llama-bench -m FILE -p $PROMPT -n $GEN -t T -r $REPS -o json, and, if
#      $KAPPA_GENERATE is set, our command
#        $KAPPA_GENERATE --model FILE --greedy --threads T
#          --max-new-tokens $GEN --prompt "$KAPPA_PROMPT"
#      whose last stderr line gives prefill and decode tokens/s; the one that
#      goes first alternates from round to round. Each run is a JSON line in
#      $OUT, with the other processes' CPU use during it (from /proc/stat).
#   4. Prints a table per file and thread count: medians over the rounds of
#      llama.cpp pp (prompt processing) and tg (generation) tokens/s, ours,
#      and the ratios kappa / llama.cpp (above 1: kappa faster), plus the
#      peak RSS of each. Runs during which other processes used 0.25 of a
#      core or more are left out of the medians (and counted) unless
#      KEEP_BUSY=1.
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
#   PROMPT, GEN         llama-bench -p / -n, our --max-new-tokens [128 / 64]
#   THREADS             thread counts, a comma list [1,2]
#   REPS                llama-bench -r [3]
#   ROUNDS              rounds of alternation [3]
#   KAPPA_GENERATE      our kappa-generate (bin/kappa-generate of the tools preset,
#                       or examples/kappa-generate of another Release
#                       build with -march=native and KAPPA_USE_OPENMP=ON);
#                       unset: llama-bench alone
#   KAPPA_BENCH         1: run ours as llama-bench runs itself, a warm-up pass
#                       and then REPS repetitions of a PROMPT-token prefill
#                       and a GEN-token decode (generate --bench, medians;
#                       llama-bench reports means); 0: one generate run, its
#                       prefill the first pass over the mapped file [0]
#   KAPPA_PROMPT        our prompt text ["the" and PROMPT - 3 more " the":
#                       PROMPT tokens with BOS for the llama-256 tokenizer of
#                       our test files; the table shows the count generate
#                       reports, check it for another tokenizer]
#   OUT                 the JSON lines [./ggml_compare.jsonl, appended to]
#   KEEP_BUSY           1: keep runs on a busy machine in the medians [0]
#
# Needs npm (the registry), git, cmake, a C/C++ compiler, python3, and
# /usr/bin/time (Debian package time). llama.cpp is MIT-licensed.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit $(( $# < 1 ? 2 : 0 ))
fi
MODELS=()
for m in "$@"; do
    [[ -f "$m" ]] || { echo "ggml_compare.sh: no such file: $m" >&2; exit 2; }
    MODELS+=("$(realpath "$m")")
done
[[ -z "${KAPPA_GENERATE:-}" || -x "$KAPPA_GENERATE" ]] ||
    { echo "ggml_compare.sh: KAPPA_GENERATE is not an executable: $KAPPA_GENERATE" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "ggml_compare.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

CACHE=${KAPPA_GGML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kappa-ggml}
PKG=${NODE_LLAMA_CPP:-node-llama-cpp@3.22.1}
COMMIT=${LLAMA_CPP_COMMIT:-de3ff815ea7d559ee917f063901b8986f038abc6}
BUILD_JOBS=${BUILD_JOBS:-2}
GGML_C_FLAGS=${GGML_C_FLAGS--mno-amx-tile -mno-amx-int8 -mno-amx-bf16}
PROMPT=${PROMPT:-128}
GEN=${GEN:-64}
THREADS=${THREADS:-1,2}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-3}
KAPPA_PROMPT=${KAPPA_PROMPT:-the$(printf ' the%.0s' $(seq $((PROMPT - 3))))}
OUT=${OUT:-$PWD/ggml_compare.jsonl}
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

HERE=$(cd "$(dirname "$0")" && pwd)
export LLAMA_BENCH="$BUILD/bin/llama-bench" PROMPT GEN THREADS REPS ROUNDS KAPPA_PROMPT OUT \
    KEEP_BUSY="${KEEP_BUSY:-0}" KAPPA_GENERATE="${KAPPA_GENERATE:-}" KAPPA_BENCH="${KAPPA_BENCH:-0}"
python3 "$HERE/ggml_compare.py" "${MODELS[@]}"
