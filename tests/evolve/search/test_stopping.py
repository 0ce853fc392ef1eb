"""Stop signals during a run: the first one stops it, a repeat does not cut the cleanup
short, and a signal to the whole process group (a terminal's Ctrl-C, coreutils
``timeout``) cannot kill the workers inside the pool's queue lock and hang the stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from evolve.search.stopping import StopRequested, critical, stop_signals

POOL_SCRIPT = textwrap.dedent("""
    import os, signal, threading, time
    from evolve.search.execution.pool import FitPool

    def ident(_ctx, x):
        return x

    if __name__ == "__main__":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the driver survives the signal
        pool = FitPool(object(), 2)
        assert pool.apply(ident, [(1,), (2,), (3,)]) == [1, 2, 3]
        time.sleep(0.5)  # idle workers: one waits for a job inside the queue's lock
        os.killpg(os.getpgrp(), signal.SIGTERM)  # what `timeout` sends after the process
        time.sleep(0.5)
        done = threading.Event()
        threading.Thread(target=lambda: (pool.reset(), done.set()), daemon=True).start()
        print("reset" if done.wait(20) else "hung", flush=True)
        os._exit(0)
""")


def test_first_signal_stops_and_a_repeat_is_ignored_while_stopping():
    cleaned = False
    with pytest.raises(StopRequested) as info, stop_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000_000):  # the handler runs at the next bytecode
                pass
            raise AssertionError("SIGTERM did not stop")
        except StopRequested:
            os.kill(os.getpid(), signal.SIGINT)  # a second signal during the cleanup
            for _ in range(100_000):
                pass
            cleaned = True
            raise
    assert info.value.exit_code == 143 and cleaned


def test_a_later_repeat_stops_at_once(monkeypatch):
    """A user who asks again after the repeat window does not wait for the cleanup."""
    import time

    from evolve.search import stopping

    monkeypatch.setattr(stopping, "REPEAT_IGNORED_S", 0.05)
    reached = []
    with pytest.raises(StopRequested), stop_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000_000):
                pass
        except StopRequested:
            time.sleep(0.1)
            with pytest.raises(StopRequested):  # the second one lands in the cleanup
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10_000_000):
                    pass
                reached.append("cleanup finished")
            raise
    assert reached == []


def test_a_signal_inside_critical_is_raised_when_it_ends():
    steps = []
    with pytest.raises(StopRequested) as info, stop_signals():
        with critical():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):
                pass
            steps.append("write finished")
        steps.append("not reached")
    assert steps == ["write finished"] and info.value.exit_code == 130


def test_a_group_signal_leaves_the_workers_alone_and_the_pool_stops(tmp_path):
    script = tmp_path / "pool_script.py"
    script.write_text(POOL_SCRIPT)
    out = tmp_path / "out.txt"
    with out.open("w") as fh:  # a file, not a pipe: a hung worker would hold a pipe open
        proc = subprocess.Popen([sys.executable, str(script)], stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert proc.wait(timeout=90) == 0, out.read_text()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert out.read_text().strip() == "reset"


def test_a_stop_whose_exception_was_dropped_is_raised_again():
    """A handler's raise inside an at-fork hook or a ``__del__`` is printed and dropped;
    the loop's check() at each generation boundary raises the stop again."""
    from evolve.search import stopping

    with stopping.stop_signals():
        stopping.check()  # nothing requested: nothing raised
        stopping._stop(signal.SIGTERM)  # what the handler raised, then lost
        with pytest.raises(stopping.StopRequested) as stop:
            stopping.check()
        assert stop.value.exit_code == 143
    with stopping.stop_signals():
        stopping.check()  # a new run starts clean


def _wrapped_stop(signum: int) -> SystemError:
    """What numba's dispatcher raises when a stop lands inside compiled code's callback."""
    try:
        try:
            raise StopRequested(signum)
        except StopRequested as stop:
            raise SystemError("CPUDispatcher(<function _run>) returned a result with an "
                              "exception set") from stop
    except SystemError as exc:
        return exc


def test_a_stop_wrapped_by_compiled_code_is_found():
    from evolve.cli.main import _interrupted
    from evolve.search.stopping import chained_stop

    exc = _wrapped_stop(signal.SIGTERM)
    assert isinstance(chained_stop(exc), StopRequested) and _interrupted(exc) == 143
    assert chained_stop(ValueError("a real failure")) is None
    assert _interrupted(ValueError("a real failure")) is None


@pytest.mark.real_data
def test_a_wrapped_stop_marks_the_run_interrupted_not_failed(tmp_path, monkeypatch):
    """Found in review: SIGTERM during the seeds' closed-loop refit exited 1 with "internal
    error" and the run was marked failed; it is interrupted, with the signal's exit code."""
    from evolve.archive import Archive
    from evolve.config.schema import Config, apply_dict, validate
    from evolve.search import loop

    def stopped(*_a, **_k):
        raise _wrapped_stop(signal.SIGTERM)

    monkeypatch.setattr(loop, "generation_zero", stopped)
    cfg = Config()
    apply_dict(cfg, {"run": {"seed": 7, "generations": 1, "head_seconds": 20.0,
                             "scenarios": ["20260217-155451-llama-2-7b-tp1-codegen"],
                             "workers": 1, "progress": False}}, "test")
    cfg.run.archive = str(tmp_path / "a.db")
    cfg = validate(cfg, "test")
    with Archive(cfg.run.archive) as archive:
        with pytest.raises(StopRequested) as info:
            loop.Search(cfg, archive, log=lambda _m: None).run()
        assert info.value.exit_code == 143
        assert [r.status for r in archive.runs()] == ["interrupted"]
