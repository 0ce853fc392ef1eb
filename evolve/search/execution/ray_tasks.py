"""Fitting and judging children as Ray tasks (``evolve run --executor ray``).

Why Ray and how it is used:

* Ray is an engine people already run (a laptop, a VM, KubeRay); evolve adds no scheduler
  of its own. Without ``run.ray_address`` a Ray instance is started for the run with
  ``run.workers`` CPUs, on the loopback address; with one, the driver joins that cluster
  and every CPU of it fits children, its workers started with this process's kernel pins
  (:func:`worker_pins`), so they compute what the driver would.
* The run's data goes to Ray's object store once, not with every task: the *static* part
  (measured scenarios, closed-loop stage slices, physics probes) once per run, the
  *corpus* part (fitting windows of the current corpora, corpus version, fingerprint
  probe) once per corpus version (at most ``search.max_refreshes`` + 2 per run). A task
  carries only (program source, seed) and references to both. Each worker
  process keeps the contexts it assembled, so it unpacks each version once. The full
  corpora (170 MB on the bundled data) never leave the driver: teacher forcing in the
  workers reads the fitting windows only.
* The parts are stored as pickled bytes, so a worker gets private, writable arrays (Ray's
  zero-copy numpy arrays are read-only, and numba's typed kernels would refuse them).
* One task per child, ``max_retries`` = :data:`MAX_RETRIES`: a worker that dies (killed,
  out of memory, node lost) costs only its task, which Ray runs again; the task is a pure
  function of its arguments, so the retry returns what the first attempt would have.
  Exceptions raised by our code are not retried (they would fail again): they stop the
  run, and ``--resume`` continues from the last complete generation.
* The LLM calls and the archive stay with the driver. Remote: the children (``map``) and
  the driver's other pure jobs (``apply``: re-scoring the elites after a corpus refresh,
  the closed-loop refits of the seeds and of the pick), which would otherwise run one
  after another on the driver while the workers wait.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import logging
import os
import pickle
import socket
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluator.api import PINNED_ENV
from evolve.errors import ClusterLost, UserError
from evolve.program.language import parse_program
from evolve.search.context import RunContext, Scored
from evolve.search.execution.pool import Job
from evolve.search.judge import fit_and_score

MAX_RETRIES = 3  # a task whose worker died is run again up to this many times
OBJECT_STORE_BYTES = 1 << 30  # object store of a Ray instance started for the run
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
PROBE_S, PROBES_LOST = 5.0, 4  # a GCS silent for 20 s is lost (Ray gives up after 60 s)

# the connection of this process: (address or "", CPUs of a started instance)
_CONNECTED: tuple[str, int] | None = None


def _is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return not address or host in LOOPBACK


def _connect_error(address: str, timeout_s: float) -> Exception | None:
    """Why a TCP connection to ``address`` ([scheme://]host:port) fails, or None."""
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        return exc
    return None


def _reachable(address: str) -> None:
    """Fail in seconds on a wrong address (Ray itself retries for many minutes)."""
    exc = _connect_error(address, 10.0)
    if exc is not None:
        raise UserError(f"cannot reach the Ray cluster at {address}: {exc}")


def connect(address: str = "", workers: int = 1) -> str:
    """Join the Ray cluster at ``address`` or start a local instance with ``workers`` CPUs,
    once per process; returns the cluster's address (for other drivers to join).

    A local instance (or a cluster on a loopback address) runs on 127.0.0.1 only. A
    cluster started with ``ray start`` uses token authentication: its token in
    ``~/.ray/auth_token`` (or ``RAY_AUTH_TOKEN``) is used when ``RAY_AUTH_MODE`` is unset.
    """
    global _CONNECTED
    key = (address, 0 if address else max(1, int(workers)))
    if address and address != "auto":
        _reachable(address)
    fresh = "ray" not in sys.modules  # Ray reads these variables when it is imported
    if _is_loopback(address):  # 127.0.0.1 for every Ray process on this machine
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        consts = sys.modules.get("ray._private.ray_constants")
        if consts is not None:  # Ray imported already: the constant that variable sets
            setattr(consts, "ENABLE_RAY_CLUSTER", False)  # noqa: B010
    if fresh and not address:  # Ray's default for a new instance, without its warning
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    elif fresh and "RAY_AUTH_MODE" not in os.environ and (
            os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").is_file()):
        os.environ["RAY_AUTH_MODE"] = "token"  # as `ray start` itself does with a token
    try:
        import ray
    except ImportError:
        raise UserError("executor ray needs Ray: pip install -e '.[ray]'") from None
    if ray.is_initialized():
        if key == _CONNECTED:
            return str(ray.get_runtime_context().gcs_address)
        ray.shutdown()
    opts: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if address:
            pins = worker_pins()
            ray.init(address=address, runtime_env={"env_vars": pins} if pins else None,
                     **opts)
        else:
            ray.init(num_cpus=key[1], include_dashboard=False,
                     object_store_memory=OBJECT_STORE_BYTES, **opts)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address}" if address else "(local instance)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot start or join the Ray cluster {where}: {first}") from None
    finally:
        from evolve.search import stopping

        stopping.reclaim()  # ray.init replaced the SIGTERM handler of a running search
    _CONNECTED = key
    return str(ray.get_runtime_context().gcs_address)


def worker_pins() -> dict[str, str]:
    """This process's kernel pins (evaluator/__init__.py: OpenBLAS's kernel family, numpy's
    SIMD level), for the workers of a cluster the run joins.

    Why: the pins act only where numpy is not loaded yet. A Ray instance the run starts
    inherits them from the driver; a cluster someone started with ``ray start`` does not,
    and its workers are pinned only because our task functions import evolve before
    anything imports numpy. A worker that loaded numpy first (a preloaded module, a set-up
    hook; a probe did on purpose, 2026-11-27) ran numpy's AVX-512 loops on an AVX-512
    machine and fitted other constants than the driver would. Ray starts the workers of a
    job with its runtime environment's variables set, so the pins are passed that way."""
    return {k: os.environ[k] for k in PINNED_ENV if k in os.environ}


def disconnect() -> None:
    """Leave the cluster (and stop an instance this process started). Without importing
    Ray when it is not imported yet: Ray reads its authentication mode from the environment
    on import, and ``connect`` sets that environment first."""
    global _CONNECTED
    _CONNECTED = None
    ray = sys.modules.get("ray")
    if ray is not None:
        ray.shutdown()


# ---- worker side ----------------------------------------------------------------------
_CONTEXTS: OrderedDict[tuple[str, str], RunContext] = OrderedDict()
_KEEP = 2  # contexts a worker keeps (the current corpus version and the one before)


class _DriverOnly(dict[str, Any]):
    """The full corpora stay with the driver; reading them in a worker is a bug, loudly."""

    def _refuse(self, *_a: Any, **_k: Any) -> Any:
        raise RuntimeError("the full corpora are not shipped to Ray workers (fitting "
                           "windows only); this evaluation must run on the driver")

    __getitem__ = __iter__ = __len__ = __contains__ = _refuse
    get = keys = values = items = _refuse


def _context(static_box: list[Any], corpus_box: list[Any]) -> RunContext:
    """The run context of this (static part, corpus version), unpacked once per worker."""
    key = (static_box[0].hex(), corpus_box[0].hex())
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        import ray

        static_b, corpus_b = ray.get([static_box[0], corpus_box[0]])
        static: RunContext = pickle.loads(static_b)
        fit_sets, version, probe = pickle.loads(corpus_b)
        ev = copy.copy(static.evaluator)
        ev.fit_sets, ev.corpus_version, ev.corpora = fit_sets, version, _DriverOnly()
        ctx = dataclasses.replace(static, evaluator=ev, probe=probe)
        _CONTEXTS[key] = ctx
        while len(_CONTEXTS) > _KEEP:
            _CONTEXTS.popitem(last=False)
    return ctx


def _fit_task(static_box: list[Any], corpus_box: list[Any], source: str,
              seed: int) -> Scored:
    """One child: exactly what a local worker computes (``fit_and_score``)."""
    return fit_and_score(_context(static_box, corpus_box), parse_program(source), seed)


def _apply_task(static_box: list[Any], corpus_box: list[Any], fn: Callable[..., Any],
                args: tuple[Any, ...]) -> Any:
    """Any other pure job of the driver's (re-scoring, a closed-loop refit)."""
    return fn(_context(static_box, corpus_box), *args)


def _warm() -> int:
    """Import the fitting code (numba kernels from its cache) before the first child."""
    import evolve.search.judge  # noqa: F401

    return os.getpid()


# ---- driver side ----------------------------------------------------------------------
def _static_bytes(ctx: RunContext) -> bytes:
    ev = copy.copy(ctx.evaluator)
    ev.corpora, ev.fit_sets, ev.corpus_version = {}, {}, ""
    return pickle.dumps(dataclasses.replace(ctx, evaluator=ev, probe=None), protocol=5)


def _corpus_key(ctx: RunContext) -> str:
    """Identity of the corpus part: the corpus version (a content hash) and the probe."""
    h = hashlib.sha256(ctx.evaluator.corpus_version.encode())
    if ctx.probe is not None:
        h.update(ctx.probe.tobytes())
    return h.hexdigest()


class RayExecutor:
    """Fits children as Ray tasks; same results, in job order, as :class:`FitPool`."""

    def __init__(self, ctx: RunContext, workers: int, address: str = "",
                 max_retries: int = MAX_RETRIES):
        self.ctx, self.address, self.max_retries = ctx, address, max_retries
        self.cluster = connect(address, workers)  # before importing Ray: it sets Ray's env
        import ray

        self._remote = ray.remote(num_cpus=1)(_fit_task)
        self._apply = ray.remote(num_cpus=1)(_apply_task)
        self._static: Any = None
        self._corpus: tuple[str, Any] | None = None
        self._pending: list[Any] = []  # refs of the tasks of the map/apply under way
        cpus = int(ray.cluster_resources().get("CPU", 1))
        warm = ray.remote(num_cpus=1)(_warm)
        self._warming = [warm.remote() for _ in range(max(1, cpus))]  # not waited for

    def _refs(self) -> tuple[Any, Any]:
        import ray

        if self._static is None:
            self._static = ray.put(_static_bytes(self.ctx))
        key = _corpus_key(self.ctx)
        if self._corpus is None or self._corpus[0] != key:
            ev = self.ctx.evaluator
            blob = pickle.dumps((dict(ev.fit_sets), ev.corpus_version, self.ctx.probe),
                                protocol=5)
            self._corpus = (key, ray.put(blob))
        return self._static, self._corpus[1]

    def map(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None
            ) -> list[Scored]:
        if not jobs:
            return []

        static, corpus = self._refs()
        task = self._remote.options(max_retries=self.max_retries, retry_exceptions=False)
        # larger programs first (they take longest), so the last tasks are short ones
        order = sorted(range(len(jobs)), key=lambda i: (-jobs[i][0].complexity, i))
        refs: list[Any] = [None] * len(jobs)
        self._pending = refs  # filled as submitted: a Ctrl-C in this loop cancels those too
        for i in order:
            prog, seed = jobs[i]
            refs[i] = task.remote([static], [corpus], prog.source, seed)
        return self._gather(refs, on_result)

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
              on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        if not jobs:
            return []
        static, corpus = self._refs()
        task = self._apply.options(max_retries=self.max_retries, retry_exceptions=False)
        refs: list[Any] = []
        self._pending = refs
        for job in jobs:
            refs.append(task.remote([static], [corpus], fn, job))
        return self._gather(refs, on_result)

    def _gather(self, refs: list[Any], on_result: Callable[[int, Any], None] | None
                ) -> list[Any]:
        self._pending = refs  # left set if the gather is interrupted: reset cancels them
        out = _gather(refs, on_result, self.cluster)
        self._pending = []
        return out

    def reset(self) -> None:
        """Cancel the tasks still running (an interrupted ``map``: on a cluster they would
        go on computing for nobody) and forget the corpus part (the next ``map`` ships the
        current one)."""
        if self._pending:
            import ray

            for ref in (r for r in self._pending if r is not None):
                with contextlib.suppress(Exception):  # finished or gone: nothing to stop
                    ray.cancel(ref, recursive=True)
            self._pending = []
        self._corpus = None
        self._warming = []


def _gather(refs: list[Any], on_result: Callable[[int, Any], None] | None,
            cluster: str = "") -> list[Any]:
    """Results in job order; ``on_result`` as each task finishes (the journal).

    While waiting, the cluster's GCS (``cluster``, host:port) is probed every
    :data:`PROBE_S` seconds: when the cluster is gone, Ray's core worker ends the process
    itself after a minute, with a C++ log line and exit status 1; this names the cause
    first, and what ``on_result`` journalled is kept for ``--resume``."""
    import ray

    index = {ref: i for i, ref in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    waiting = list(refs)
    unreachable = 0
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1, timeout=PROBE_S)
        if not ready:
            unreachable = 0 if _gcs_alive(cluster) else unreachable + 1
            if unreachable >= PROBES_LOST:
                raise ClusterLost(f"lost the Ray cluster at {cluster}: its GCS has not "
                                  f"answered for {PROBE_S * PROBES_LOST:.0f} s (resume on "
                                  "a cluster with --ray-address ADDR, or with --executor "
                                  "local)")
            continue
        unreachable = 0
        for ref in ready:
            i = index[ref]
            out[i] = ray.get(ref)
            if on_result is not None:
                on_result(i, out[i])
    return out


def _gcs_alive(cluster: str) -> bool:
    host, _, port = cluster.rpartition(":")
    if not host or not port.isdigit():
        return True  # no address to probe: leave it to Ray
    return _connect_error(cluster, PROBE_S) is None
