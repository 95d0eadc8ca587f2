#!/usr/bin/env bash
# Runs each benchmark binary very briefly, so that none can rot, two at a time
# (a smoke run checks that every case runs, not its speed). Each binary's
# output goes to <log-dir>/<name>.log and is printed, in the given order, when
# all have finished; the run fails if any binary failed.
#
#   smoke.sh --log-dir DIR [--jobs 2] -- BINARY [ARGS...] -- BINARY [ARGS...] ...
set -uo pipefail
log_dir="" jobs=2
while (($#)) && [[ "$1" != "--" ]]; do
  case "$1" in
    --log-dir) log_dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "smoke.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$log_dir" && $# -gt 1 ]] || { echo "usage: smoke.sh --log-dir DIR [--jobs N] -- BINARY [ARGS...] -- ..." >&2; exit 2; }
mkdir -p "$log_dir"

# Split the arguments at each "--" into one command line per binary.
commands=() current=""
shift  # the first "--"
for a in "$@"; do
  if [[ "$a" == "--" ]]; then
    [[ -n "$current" ]] && commands+=("$current")
    current=""
  else
    current+="$(printf '%q ' "$a")"
  fi
done
[[ -n "$current" ]] && commands+=("$current")

run_one() {  # run_one <index> <command line>
  local log="$log_dir/$1.log"
  eval "$2" >"$log" 2>&1
  echo $? >"$log.rc"
}

start=$(date +%s)
running=0
for i in "${!commands[@]}"; do
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  run_one "$i" "${commands[$i]}" &
  running=$((running + 1))
done
wait

status=0
for i in "${!commands[@]}"; do
  log="$log_dir/$i.log"
  printf '\n---- %s\n' "${commands[$i]}"
  cat "$log"
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  if [[ "$rc" != 0 ]]; then
    printf -- '---- FAILED (exit %s): %s\n' "$rc" "${commands[$i]}"
    status=1
  fi
done
printf '\nsmoke run: %d binaries, %d at a time, %d s\n' "${#commands[@]}" "$jobs" $(($(date +%s) - start))
exit $status
