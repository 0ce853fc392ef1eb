"""The journal: every finished job of the generation in progress, kept as it finishes.

Why: a generation is committed to the archive only when it is complete, and one can take
minutes (generation 0: every seed fitted and refitted closed loop) or cost money (LLM
replies). A kill used to lose all of it. Now each finished job's result is written to the
archive's ``journal`` table (:mod:`evolve.archive.process_tables`) at once, keyed by a
content hash of the job, and ``--resume`` serves a job found there instead of computing it again.

Why the archive stays byte-identical to an uninterrupted run: a job is a pure function of
its key's content (the run is fixed; the key holds the kind of job, its arguments and the
corpus version), so a journaled result *is* the result the job would compute; it is stored
with pickle, so it comes back with the same types and bits. The journal lives outside the
compared tables and is deleted with the commit of its generation.

Why a restricted unpickler: an archive may be shared (a server); its journal must not be
a way to run code. Only the types results are made of load; anything else is ignored as
if the job had not been journaled (it is then simply recomputed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evolve.archive import Archive
from evolve.search.execution.executors import Executor, Result
from evolve.search.execution.pool import Job
from evolve.search.stopping import critical

_SAFE = {("evolve.search.context", "Scored"), ("evolve.text.words", "FitStatus"),
         ("evolve.text.words", "Scope"), ("evolve.text.words", "Split"),
         ("evolve.text.words", "ScoreMode"), ("numpy", "dtype"), ("numpy", "ndarray"),
         ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
         ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
         ("numpy.dtypes", "Float64DType"), ("numpy.dtypes", "Int64DType"),
         ("numpy.dtypes", "BoolDType"), ("builtins", "float"), ("builtins", "int"),
         ("builtins", "complex"), ("builtins", "set"), ("builtins", "frozenset")}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SAFE:
            raise pickle.UnpicklingError(f"{module}.{name} is not a result type")
        return super().find_class(module, name)


# When a run stops, not what any job computes: ``--resume --generations N`` (or a new wall
# time or budget) must find the jobs the interrupted run journaled.
STOP_KNOBS = {"run": ("generations", "wall_time_s", "max_evaluations"),
              "llm": ("max_total_tokens", "max_cost_usd")}


def _job_config(stored: dict[str, Any]) -> dict[str, Any]:
    """The run's stored config without its stop knobs."""
    return {section: {k: v for k, v in values.items() if k not in STOP_KNOBS.get(section, ())}
            if isinstance(values, dict) else values for section, values in stored.items()}


def _canon(x: Any) -> Any:
    """A JSON-able form of a job's argument that depends on its content only."""
    if hasattr(x, "stored_dict"):  # the run's Config: what can change a job's result
        return {"config": _canon(_job_config(x.stored_dict()))}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {type(x).__name__: {f.name: _canon(getattr(x, f.name))
                                   for f in dataclasses.fields(x)}}
    if isinstance(x, dict):
        return {"dict": [[_canon(k), _canon(v)] for k, v in sorted(
            x.items(), key=lambda kv: repr(kv[0]))]}
    if isinstance(x, list | tuple):
        return [_canon(v) for v in x]
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, float | np.floating):
        return {"f": repr(float(x))}
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, str) or x is None:
        return x
    if isinstance(x, np.ndarray):
        return {"nd": hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
                "shape": list(x.shape), "dtype": str(x.dtype)}
    raise TypeError(f"cannot key a job on a {type(x).__name__}")


def job_key(*parts: Any) -> str:
    """sha256 of a job's canonical content."""
    text = json.dumps(_canon(list(parts)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _safe_key(*parts: Any) -> str | None:
    """A job's key, or None for a job that cannot be keyed (it is then never journaled:
    recomputing is always correct, a wrong key never is)."""
    try:
        return job_key(*parts)
    except (TypeError, ValueError):
        return None


class Journal:
    """A run's journal: read once when the run starts, appended to as jobs finish."""

    def __init__(self, archive: Archive, run_id: int):
        self.archive, self.run_id = archive, run_id
        self.generation = 0
        self._found = archive.journal_load(run_id)
        self.loaded = len(self._found)
        self.hits = 0  # jobs served from the journal
        self.writes = 0  # jobs journaled by this process
        self._lock = threading.Lock()

    def committed(self) -> None:
        """The generation is in the archive (its journal rows went with that commit):
        forget its entries here too, so memory does not grow with the run."""
        with self._lock:
            self._found.clear()

    def get(self, key: str) -> Any | None:
        """The journaled result of job ``key``, or None."""
        blob = self._found.get(key)
        if blob is None:
            return None
        try:
            value = _SafeUnpickler(io.BytesIO(blob)).load()
        except Exception:  # unreadable: recompute rather than trust it
            return None
        with self._lock:
            self.hits += 1
        return value

    def put(self, key: str, kind: str, value: Any) -> None:
        """Journal a finished job now (before anything else happens)."""
        blob = pickle.dumps(value, protocol=5)
        with self._lock, critical():
            self.archive.journal_put(self.run_id, self.generation, key, kind, blob)
            self._found[key] = blob
            self.writes += 1

    # -- LLM exchanges: plain JSON (a reply is text), keyed by position and request --------
    def exchange(self, index: int, request_hash: str) -> dict[str, Any] | None:
        """A journaled LLM exchange of this generation (``{"exchange", "cached"}``)."""
        blob = self._found.get(job_key("llm", self.generation, index, request_hash))
        if blob is None:
            return None
        try:
            entry = json.loads(blob.decode("utf-8"))
        except (ValueError, RecursionError):  # not what put_exchange wrote: not journaled
            return None
        with self._lock:
            self.hits += 1
        return entry if isinstance(entry, dict) else None

    def put_exchange(self, index: int, request_hash: str, exchange: dict[str, Any],
                     cached: bool) -> None:
        key = job_key("llm", self.generation, index, request_hash)
        blob = json.dumps({"exchange": exchange, "cached": cached}, sort_keys=True).encode()
        with self._lock, critical():  # as put: a stop signal waits for the write
            self.archive.journal_put(self.run_id, self.generation, key, "llm", blob)
            self._found[key] = blob
            self.writes += 1


class JournaledExecutor:
    """An :class:`Executor` that serves journaled jobs and journals the others as they
    finish; results (and their order) are those of the wrapped executor."""

    def __init__(self, inner: Executor, journal: Journal, corpus_version: Callable[[], str]):
        self.inner, self.journal, self._corpus = inner, journal, corpus_version

    def map(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None
            ) -> list[Result]:
        keys = [_safe_key("fit", p.id, seed, self._corpus()) for p, seed in jobs]
        return self._run(keys, "fit", list(jobs), on_result,
                         lambda todo, done: self.inner.map(todo, on_result=done))

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
              on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        name = f"{fn.__module__}.{fn.__qualname__}"
        keys = [_safe_key("apply", name, self._corpus(), *job) for job in jobs]
        return self._run(keys, f"apply:{fn.__name__}", list(jobs), on_result,
                         lambda todo, done: self.inner.apply(fn, todo, on_result=done))

    def _run(self, keys: list[str | None], kind: str, jobs: list[Any],
             on_result: Callable[[int, Any], None] | None,
             compute: Callable[[list[Any], Callable[[int, Any], None]], list[Any]]
             ) -> list[Any]:
        out: list[Any] = [None if k is None else self.journal.get(k) for k in keys]
        todo = [i for i, r in enumerate(out) if r is None]
        if on_result is not None:
            for i, r in enumerate(out):
                if r is not None:
                    on_result(i, r)

        def done(j: int, result: Any) -> None:
            key = keys[todo[j]]
            if key is not None:
                self.journal.put(key, kind, result)
            if on_result is not None:
                on_result(todo[j], result)

        if todo:
            for j, result in enumerate(compute([jobs[i] for i in todo], done)):
                out[todo[j]] = result
        return out

    def reset(self) -> None:
        self.inner.reset()
