#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine, in the active virtualenv:
# the project with its dev extras, and the real components some tests start
# (Debian's Chromium for the report's browser test; Debian's PostgreSQL server and Ray
# for the scale-out tests). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[dev]'
bash scripts/ci_setup_browser.sh
bash scripts/ci_setup_services.sh
bash scripts/ci_setup_blis.sh     # Debian Go libraries for building real BLIS (tests/export/test_blis_replay.py)
