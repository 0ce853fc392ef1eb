#!/usr/bin/env bash
# qemu's user-mode emulator (qemu-x86_64, version 8 or later) for the cross-CPU test of the
# golden archive (tests/integration/test_golden_archive.py): it runs the golden search on an
# emulated Haswell CPU (AVX2 and FMA, no AVX-512) and compares the digest. Debian 12's
# qemu 7.2 emulates AVX2 wrongly (numpy's np.unique of 9,000 integers under 100 finds 125
# distinct values), so on Debian 12 it comes from bookworm-backports. Idempotent; x86-64.
# Opting out on a machine without it: EVOLVE_SKIP_QEMU=1 (CI does not set it).
set -euo pipefail
major() { qemu-x86_64 --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | head -1; }
if [ "$(major || true)" = "" ] || [ "$(major)" -lt 8 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  TARGET=()
  if [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ]; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" \
      | $SUDO tee /etc/apt/sources.list.d/evolve-bookworm-backports.list >/dev/null
    TARGET=(-t bookworm-backports)
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${TARGET[@]}" qemu-user >/dev/null
fi
qemu-x86_64 --version | head -1
