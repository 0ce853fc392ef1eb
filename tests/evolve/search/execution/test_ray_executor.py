"""The Ray executor, for real: a cluster started with ``ray start --head`` on 127.0.0.1
fits the children of a short search, and the archive equals the local executor's; a Ray
worker killed in the middle of a task costs nothing (the task is retried, the archive is
the same). Also: a Ray instance started by the run itself (no address).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from scale_helpers import run_tiny

from evolve.archive import Archive
from evolve.search.loop import Search

pytestmark = pytest.mark.real_data  # the tiny search cuts the bundled measured runs


def _assert_same(tables, ref_tables) -> None:
    for name in ref_tables:
        assert tables[name] == ref_tables[name], f"table {name} differs"


def test_ray_cluster_gives_the_local_archive(ray_head, sqlite_reference, tmp_path):
    ref_summary, ref_tables = sqlite_reference(11)
    summary, tables = run_tiny(tmp_path / "ray.db", 11, executor="ray",
                               ray_address=ray_head.address)
    assert summary.status == "finished" and summary.best_id == ref_summary.best_id
    _assert_same(tables, ref_tables)
    import ray

    assert ray.get_runtime_context().gcs_address == ray_head.address  # joined, not started


def test_the_workers_of_a_joined_cluster_run_as_the_driver(ray_head):
    """The cluster was started without the kernel pins (``ray_cluster``), as ``ray start``
    from a shell is; the run brings them to its workers, so that their numpy runs the
    loops the driver's runs even where numpy is loaded before evolve (a preloaded module, a
    worker set-up hook). The probe imports numpy first on purpose: without the pins in its
    environment it ran numpy's AVX-512 loops on this machine, and a worker that had run it
    then fitted the tiny search's children into another archive than the local one."""
    from evaluator import _cpu_flags
    from evolve.search.execution import ray_tasks as ray_executor

    def simd(names: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
        """The pins in this process's environment and the SIMD targets its numpy runs
        (numpy imported before anything of evolve)."""
        import os as os_

        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        return ({k: os_.environ[k] for k in names if k in os_.environ},
                sorted(t for t in __cpu_dispatch__ if __cpu_features__.get(t)))

    ray_executor.disconnect()
    ray_executor.connect(ray_head.address, 1)  # before importing Ray: it sets Ray's env
    import ray

    if {"avx2", "fma"} <= _cpu_flags():
        assert ray_executor.worker_pins(), "importing evolve pins OpenBLAS on this CPU"
    names = ray_executor.PINNED_ENV
    assert ray.get(ray.remote(simd).remote(names)) == simd(names)


class _Killer(threading.Thread):
    """Kills (SIGKILL) the first Ray worker of the cluster seen running a child's fit."""

    def __init__(self, cluster, after_s: float = 0.0):
        super().__init__(daemon=True)
        self.cluster, self.after_s = cluster, after_s
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.is_set() and not self.killed:
            if time.monotonic() - t0 >= self.after_s:
                for pid in self.cluster.descendants():
                    try:
                        title = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        continue
                    if title.startswith(b"ray::_fit_task"):
                        os.kill(pid, signal.SIGKILL)
                        self.killed.append(pid)
                        break
            time.sleep(0.01)


def test_a_killed_worker_loses_no_candidate(ray_head, tmp_path):
    killer = _Killer(ray_head, after_s=1.0)  # past generation 0's first fits
    killer.start()
    try:
        summary, tables = run_tiny(tmp_path / "killed.db", 11, executor="ray",
                                   ray_address=ray_head.address, generations=5)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed, "no Ray worker was seen running a fit (nothing was killed)"
    assert summary.status == "finished"
    ref_path = tmp_path / "ref5.db"
    _s, ref5 = run_tiny(ref_path, 11, generations=5)
    _assert_same(tables, ref5)


def test_ray_instance_started_for_the_run(sqlite_reference, tmp_path):
    from evolve.search.execution.ray_tasks import disconnect

    _ref_summary, ref_tables = sqlite_reference(11)
    try:
        _summary, tables = run_tiny(tmp_path / "local-ray.db", 11, executor="ray", workers=2)
        import ray

        assert ray.cluster_resources().get("CPU") == 2
        assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    finally:
        disconnect()
    _assert_same(tables, ref_tables)
    with Archive(tmp_path / "local-ray.db", create=False) as ar:
        stored = ar.run(1).config["run"]
    assert "executor" not in stored and "ray_address" not in stored  # how, not what


def test_missing_ray_address_is_a_user_error(tmp_path):
    from scale_helpers import tiny_config

    from evolve.errors import UserError

    cfg = tiny_config(tmp_path / "x.db", 11, executor="ray", ray_address="127.0.0.1:9")
    with Archive(cfg.run.archive) as ar, pytest.raises(UserError, match="cannot reach"):
        Search(cfg, ar, log=lambda _m: None)


def test_study_on_the_ray_cluster(ray_head, sqlite_reference, tmp_path, capsys):
    """Two seeds' drivers join one cluster at once; each picks what it picks alone."""
    import json

    from scale_helpers import tiny_toml
    from test_study import check_study_output, picked

    from evolve.cli.main import main

    cfg, out = tiny_toml(tmp_path / "tiny.toml"), tmp_path / "study"
    assert main(["study", "--seeds", "11", "12", "--config", str(cfg), "--out", str(out),
                 "--executor", "ray", "--ray-address", ray_head.address]) == 0
    check_study_output(capsys.readouterr().out, [11, 12])
    picks = json.loads((out / "summary.json").read_text())["picks"]
    for seed in (11, 12):
        assert picks[str(seed)] == picked(sqlite_reference(seed)[1])


def test_an_interrupted_map_cancels_its_tasks_on_the_cluster(ray_head, tmp_path):
    """Ctrl-C in the driver resets the executor; tasks still running on a cluster must stop
    computing for nobody (a long job stands in for a child's fit)."""
    import ray
    from scale_helpers import tiny_config

    cfg = tiny_config(tmp_path / "cancel.db", 11, executor="ray",
                      ray_address=ray_head.address)
    with Archive(cfg.run.archive) as ar:
        ex = Search(cfg, ar, log=lambda _m: None).pool.inner
        outcome: list[BaseException | None] = []

        def drive() -> None:
            try:
                ex.apply(lambda _ctx, s: __import__("time").sleep(s), [(120.0,)])
                outcome.append(None)
            except BaseException as exc:  # what the waiting driver sees
                outcome.append(exc)

        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        deadline = time.monotonic() + 60
        while not ex._pending and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ex._pending, "the task was never submitted"
        (ref,) = ex._pending
        time.sleep(1.0)  # let it start sleeping on a worker
        ex.reset()
        driver.join(timeout=30)
        assert not driver.is_alive(), "the task went on running after reset"
        assert isinstance(outcome[0], ray.exceptions.TaskCancelledError), outcome
        assert ex._pending == []
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=5)


def test_joining_ray_keeps_the_stop_handler_of_a_running_search(ray_head):
    """Found in review: ray.init installs its own SIGTERM handler (sys.exit), and SIGTERM
    then crashed a Ray run with a C++ dump instead of stopping it at a safe point; the
    search takes its handler back. (An end-to-end SIGTERM of a Ray run passes too, but Ray's
    core worker sometimes aborts on its own while cancelled tasks report back:
    "Tried to complete task that was not pending", a Ray race left to the closing note.)"""
    from evolve.search import stopping
    from evolve.search.execution import ray_tasks as ray_executor
    ray_executor.disconnect()
    with stopping.stop_signals():
        ray_executor.connect(ray_head.address, 1)
        assert signal.getsignal(signal.SIGTERM) is stopping._handler
        assert signal.getsignal(signal.SIGINT) is stopping._handler
    ray_executor.disconnect()
