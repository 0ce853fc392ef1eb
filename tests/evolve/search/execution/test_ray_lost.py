"""A Ray cluster that dies under a running search: the run names the cause, keeps what
finished, and resumes elsewhere into the archive an uninterrupted run writes.

Why its own cluster: the test kills it (the module fixture of test_ray_executor.py is
shared by its tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from scale_helpers import tiny_toml, wait_for_generation
from scale_services import ray_cluster

from evolve.archive import Archive

pytestmark = pytest.mark.real_data  # the tiny search cuts the bundled measured runs


def test_a_lost_cluster_stops_the_run_with_a_resume_hint(sqlite_reference, tmp_path):
    db = tmp_path / "lost.db"
    argv = [sys.executable, "-m", "evolve.cli.main", "run", "--config",
            str(tiny_toml(tmp_path / "tiny.toml")), "--seed", "11", "--archive", str(db)]
    with ray_cluster(cpus=2) as cluster:
        proc = subprocess.Popen([*argv, "--executor", "ray", "--ray-address",
                                 cluster.address, "--generations", "30"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_generation(db, 1, proc)
        for pid in [*cluster.descendants(), cluster.proc.pid]:  # the whole cluster, at once
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        _out, err = proc.communicate(timeout=300)
    # before this, Ray's core worker ended the driver after 60 s: exit 1, a C++ log line
    assert proc.returncode == 2, err[-2000:]
    assert f"lost the Ray cluster at {cluster.address}" in err, err[-2000:]
    assert "resume with: evolve run --resume 1" in err

    again = subprocess.run([*argv[:4], "--resume", "1", "--archive", str(db), "--executor",
                            "local", "--generations", "3"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    _s, ref = sqlite_reference(11)
    with Archive(str(db)) as ar:
        tables = ar.comparable()
    for name in ("programs", "evaluations", "frontier", "grid_cells"):  # as if never lost
        assert tables[name] == ref[name], f"table {name} differs"
