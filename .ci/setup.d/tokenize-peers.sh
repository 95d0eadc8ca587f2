#!/usr/bin/env bash
# CI: install the tokenizer peers before the tests (ctest's fixture
# kappa.tokenize.peer_setup does the same; doing it here shows npm problems
# early and separately).
set -euo pipefail
exec bash "$(dirname "$0")/../../tests/tokenize/peer/setup.sh"
