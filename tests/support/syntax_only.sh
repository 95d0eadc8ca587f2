#!/bin/sh
# Compiler launcher for translation units that are compiled only for their
# diagnostics, never linked (the header check, the instantiation check): runs
# the compile command with -fsyntax-only, which still parses, instantiates
# every template and gives clang's warnings (all from its front end), but
# skips code generation and, under ASan, instrumentation (the instantiation
# check: 323 -> 63 s under clang 14 with ASan). GCC's flow-based warnings
# (-Wmaybe-uninitialized, -Warray-bounds) need its optimizer and are lost
# here; both targets compile at -O0 and are built by the clang presets. The object
# file the build tool expects is then created empty. A precompiled header's
# own compile (-emit-pch, -x c++-header) runs unchanged.
set -e
out=""
prev=""
for a in "$@"; do
  case "$a" in
    -emit-pch | c++-header) exec "$@" ;;
  esac
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"
done
"$@" -fsyntax-only
if [ -n "$out" ]; then : >"$out"; fi
