"""The seed-7, 10-generation archive, byte for byte: behaviour changes only on purpose.

Refactors must not change what a run decides. This test runs the seed-7, 10-generation
search on a small cut of the real data (three runs, one per split, their first 20 s; small
fitting budgets, so it takes seconds) and compares the archive's digest
(``evolve.archive.digest``: every table without its wall-clock and code-version columns)
with the digest recorded here. The first recorded digest was produced by the code *before*
the structure refactor (issue 13) and reproduced after it; the full-data run
(``evolve run --generations 10 --seed 7``) was compared the same way with
``scripts/archive_digest.py``.

If a change of behaviour is intended (new features, a new selection rule), update
``GOLDEN`` in the same commit and say why in its message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from needs import require_qemu

from evaluator import PINNED_ENV
from evaluator.api import data_dir
from evolve.archive import Archive
from evolve.archive.digest import archive_digest
from evolve.config.schema import Config, apply_dict, validate
from evolve.search.loop import RunSummary, Search

pytestmark = pytest.mark.real_data  # tiny searches over three bundled runs

SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test
CONFIG = {"run": {"seed": 7, "generations": 10, "head_seconds": 20.0, "scenarios": SCENARIOS,
                  "workers": 1, "progress": False},
          "search": {"children": 3, "refresh_min_gap": 1, "refresh_margin": 0.02},
          "fit": {"max_evals": 40, "restarts": 0, "window_steps": 300,
                  "seed_polish_evals": 8, "polish_evals": 8}}
# The digest changes only on purpose; each change and why: docs/notes/golden-archive-history.md.
GOLDEN = "2852c8395eadd094f63b127e9fcfd1443621266d3fd4d11dd434f418c0a469b2"


def golden_run(archive_path: str, workers: int, data: str = "") -> tuple[RunSummary, str]:
    """The golden search into ``archive_path`` (over the data read from ``data``, default
    the usual place): its summary and its archive's digest."""
    cfg = Config()
    apply_dict(cfg, CONFIG, "golden")
    cfg.run.workers = workers
    cfg.run.archive = archive_path
    cfg.run.data = data
    cfg = validate(cfg, "golden")
    with Archive(cfg.run.archive) as archive:
        summary = Search(cfg, archive, log=lambda _m: None).run()
        return summary, archive_digest(archive)


@pytest.mark.parametrize("workers", [1, 2])
def test_seed7_archive_matches_the_recorded_digest(tmp_path, workers):
    summary, digest = golden_run(str(tmp_path / "a.db"), workers)
    assert summary.status == "finished" and summary.generations_done == 10
    assert digest == GOLDEN


def test_the_same_data_read_from_another_path_gives_the_same_archive(tmp_path):
    """Where the data lives is not part of the archive (``INFORMATIONAL_CONFIG``): the
    golden search over the same files, read through a link in another directory, stores
    that path in its config and still compares equal to the recorded digest."""
    elsewhere = tmp_path / "elsewhere" / "data"
    elsewhere.parent.mkdir()
    elsewhere.symlink_to(data_dir().resolve(), target_is_directory=True)
    summary, digest = golden_run(str(tmp_path / "a.db"), 1, data=str(elsewhere))
    with Archive(str(tmp_path / "a.db"), create=False) as archive:
        assert archive.run(summary.run_id).config["run"]["data"] == str(elsewhere)
    assert digest == GOLDEN


def test_an_avx2_only_cpu_computes_the_same_archive(tmp_path):
    """Same seed, same archive on another CPU: the golden search on an emulated Haswell
    (qemu-x86_64 -cpu Haswell: AVX2 and FMA, no AVX-512), where numpy and numba pick their
    AVX2 code by themselves and OpenBLAS its Haswell kernels, as on a real AVX2-only
    machine (the child process pins for itself). Why: the digest
    above is an AVX-512 machine's (numpy pinned to its AVX2 loops, evaluator/__init__.py);
    this checks that the pins make it every AVX2 machine's (qemu emulates the floating-point
    instructions in software, rounding as IEEE 754 prescribes). ``EVOLVE_NATIVE_SIMD=1``:
    on such a machine the numpy pin does nothing (qemu-user shows the host's /proc/cpuinfo,
    AVX-512 flags included)."""
    qemu = require_qemu()
    code = ("import os, sys; "
            "sys.path[:0] = [sys.argv[1], os.path.join(os.path.dirname(sys.argv[1]), 'support')]; "
            "from test_golden_archive import golden_run; "
            "s, d = golden_run(sys.argv[2], 1); print(s.status, s.generations_done, d)")
    env = {**os.environ, "EVOLVE_NATIVE_SIMD": "1"}
    for pinned in PINNED_ENV:
        env.pop(pinned, None)
    out = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, "-c", code,
                          str(Path(__file__).parent), str(tmp_path / "a.db")],
                         env=env, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["finished", "10", GOLDEN]


def test_a_twin_is_rejected_before_it_is_fitted(tmp_path):
    """Children are fingerprinted in the driver before any is fitted: a child with the
    same predictions as a judged program is rejected without a fit (a fifth of a long
    run's children are such twins). The executor is the real one, recording its jobs."""
    cfg = Config()
    apply_dict(cfg, CONFIG, "golden")
    cfg.run.archive = str(tmp_path / "a.db")
    cfg = validate(cfg, "golden")
    fitted: list[str] = []
    with Archive(cfg.run.archive) as archive:
        search = Search(cfg, archive, log=lambda _m: None)
        inner = search.pool.inner
        real_map = inner.map

        def recording_map(jobs, on_result=None):
            fitted.extend(p.id for p, _seed in jobs)
            return real_map(jobs, on_result=on_result)

        inner.map = recording_map  # type: ignore[method-assign]
        search.run()
        twins = [e.program_id for e in archive.evaluations(search.run_id)
                 if e.reason.startswith("same predictions as program")]
    assert twins, "the golden run proposes twins; without one this test shows nothing"
    assert not set(twins) & set(fitted)
    assert len(fitted) > len(twins)
