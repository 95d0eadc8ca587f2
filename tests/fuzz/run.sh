#!/usr/bin/env bash
# Runs kappa's fuzzers for a bounded time each and prints one line per target
# with libFuzzer's final stats (exec/s, total executions, peak RSS). Any
# finding (crash, sanitizer report, failed property, leak, timeout, out of
# memory) fails the run; its input is saved as <bin-dir>/artifacts/<name>-*.
#
#   run.sh --bin-dir <dir with fuzz_*> [--seconds 30] [--jobs 2] name:max_len...
#
# Each fuzzer starts from its committed seeds (tests/fuzz/corpus/<name>) and
# regressions (tests/fuzz/regressions/<name>), with tests/fuzz/dict/<name>.dict;
# inputs it finds go to <bin-dir>/work/<name>, never into the source tree.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="" seconds=30 jobs=2 specs=()
while (($#)); do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) specs+=("$1"); shift ;;
  esac
done
[[ -n "$bin_dir" && ${#specs[@]} -gt 0 ]] || { echo "usage: run.sh --bin-dir DIR [--seconds N] [--jobs N] name:max_len..." >&2; exit 2; }
mkdir -p "$bin_dir/work" "$bin_dir/artifacts" "$bin_dir/logs"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

run_one() {
  local name="${1%%:*}" max_len="${1##*:}"
  local exe="$bin_dir/fuzz_$name" log="$bin_dir/logs/$name.log"
  local args=(-max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=2048
              -malloc_limit_mb=2048 -timeout=20 -print_final_stats=1
              -artifact_prefix="$bin_dir/artifacts/$name-")
  [[ -f "$here/dict/$name.dict" ]] && args+=(-dict="$here/dict/$name.dict")
  local dirs=("$bin_dir/work/$name")
  mkdir -p "$bin_dir/work/$name"
  for d in "$here/corpus/$name" "$here/regressions/$name"; do [[ -d "$d" ]] && dirs+=("$d"); done
  "$exe" "${args[@]}" "${dirs[@]}" >"$log" 2>&1
  echo $? >"$log.rc"
}

start=$(date +%s)
running=0
for spec in "${specs[@]}"; do
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  run_one "$spec" &
  running=$((running + 1))
done
wait

status=0
printf '%-18s %10s %14s %8s %8s  %s\n' target exec/s executions corpus rss_mb result
for spec in "${specs[@]}"; do
  name="${spec%%:*}" log="$bin_dir/logs/$name.log"
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  units=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  result=ok
  if [[ "$rc" != 0 ]]; then result="FINDING (exit $rc)"; status=1; fi
  printf '%-18s %10s %14s %8s %8s  %s\n' "$name" "$(stat average_exec_per_sec)" \
    "$(stat number_of_executed_units)" "${units:-?}" "$(stat peak_rss_mb)" "$result"
done
for spec in "${specs[@]}"; do
  name="${spec%%:*}" log="$bin_dir/logs/$name.log"
  if [[ "$(cat "$log.rc" 2>/dev/null)" != 0 ]]; then
    echo
    echo "---- fuzz_$name: finding (full log $log) ----"
    grep -v '^#[0-9]' "$log" | tail -60
    ls -1 "$bin_dir/artifacts/$name-"* 2>/dev/null | sed 's/^/input saved: /'
  fi
done
echo "fuzzing: ${#specs[@]} targets x ${seconds} s, ${jobs} at a time, $(( $(date +%s) - start )) s wall"
exit $status
