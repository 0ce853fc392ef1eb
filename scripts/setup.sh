#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine, in the active virtualenv:
# the project with its dev extras, and the real components some tests start
# (Debian's Chromium for the report's browser test). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[dev]'
bash scripts/ci_setup_browser.sh
