#!/usr/bin/env bash
# What the browser test of `evolve report` needs (tests/evolve/report/test_report_browser.py):
# Debian's Chromium (apt, only if /usr/bin/chromium is missing) and Playwright for Python
# (the `report` extra), which drives that system browser. Playwright's own browser download
# is never used (it needs a network CI does not have). Idempotent; run inside the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
python -m pip install --quiet -c scripts/constraints.txt -e '.[report]'
/usr/bin/chromium --version 2>/dev/null | head -1 || true
python -c "import playwright; print('playwright', __import__('importlib.metadata').metadata.version('playwright'))"
