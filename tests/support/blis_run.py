"""Build real BLIS with an exported model, and replay a measured run in it, as a user does.

Why one place: the real-BLIS tests (test_blis_replay, test_blis_measured, test_blis_async)
take docs/blis.md's path, `scripts/build_blis.py` then `evolve export-trace` and the
`blis replay` command it prints; written once, they cannot drift apart from each other.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from needs import require_blis_build

from evolve.cli.main import main
from evolve.export.go.writer import BLIS_COMMIT

ROOT = Path(__file__).resolve().parents[2]


def build_blis(go_file: Path, out: Path, *flags: str) -> Path:
    """``scripts/build_blis.py --model GO_FILE --out OUT FLAGS`` on BLIS at the pinned commit
    (a missing toolchain or source fails the test, tests/support/needs.py)."""
    go, source = require_blis_build(BLIS_COMMIT)
    out.parent.mkdir(parents=True, exist_ok=True)
    build = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_blis.py"),
                            "--source", str(source), "--model", str(go_file), "--out",
                            str(out), *flags], capture_output=True, text=True,
                           env=dict(os.environ, GO=go))
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def replay(blis: Path, run: str, data_path: Path, prefix: Path, capsys,
           *trace_args: str) -> list[dict]:
    """``evolve export-trace RUN`` to ``prefix``, then the ``blis replay`` command it prints
    (run in ``prefix``'s folder); BLIS's per-request results (``--results-path``)."""
    capsys.readouterr()
    assert main(["export-trace", run, "--data", str(data_path), *trace_args, "--out",
                 str(prefix), "--blis", str(blis), "--blis-dir", str(blis.parent)]) == 0
    argv = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    res = subprocess.run(argv, capture_output=True, text=True, cwd=prefix.parent)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(Path(f"{prefix}.results.json").read_text())
