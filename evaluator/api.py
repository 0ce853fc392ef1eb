"""The evaluator's public surface: the only module ``evolve`` imports from ``evaluator``.

Contract (the seam between the two packages):

* A step-time model is a :class:`StepModel`: a vectorised function over a feature matrix
  (teacher forcing), the same function compiled by numba for one step (closed loop), an
  optional per-request queueing delay, and the positions of the two E2E-only constants.
  ``evolve.program.language`` builds these from programs; ``evaluator.scoring.baselines`` builds
  them by hand.
* Constants are per scenario: ``ConstMap`` maps a scenario name to its constant vector. The
  scope policy (global / per_model / per_scenario) lives in ``evolve.fitting``.
* Closed loop (:meth:`Evaluator.simulate`) produces corpora and official metrics;
  teacher forcing (:meth:`Evaluator.score`) rescores a model on fixed corpora in
  milliseconds, which is what CMA-ES and the search loop call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

import numpy as np

from evaluator import PINNED_ENV
from evaluator.data.experiment import (
    ExperimentSpec,
    experiment_dirs,
    load_scenarios,
    write_experiment,
)
from evaluator.data.host_time import sampled_host_us, sampled_steps
from evaluator.data.prompt_cache import prompt_period, with_prompt_cache
from evaluator.data.run_files import limit_problem
from evaluator.data.scenarios import LOOPS, DataError, Scenario, data_dir
from evaluator.features.components import request_inputs
from evaluator.features.glossary import (
    FEATURE_INDEX,
    FEATURE_NAMES,
    FEATURES,
    KERNEL_FEATURES,
    N_FEATURES,
    PEAK_FLOPS,
    REQUEST_FIELD_NAMES,
    REQUEST_FIELDS,
    STAT_INDEX,
)
from evaluator.features.probes import ProbeBatches, probe_batches
from evaluator.ingest.common import ServerFlags, parse_stages
from evaluator.ingest.from_tracev2 import from_tracev2
from evaluator.ingest.inference_perf import from_inference_perf
from evaluator.ingest.kv_pool import estimate_for as estimate_kv_pool
from evaluator.ingest.to_tracev2 import replay_command, scenario_trace, shell
from evaluator.ingest.tracev2 import read_tracev2, write_tracev2
from evaluator.ingest.unseen import unseen_scenarios
from evaluator.model import MAX_STEP_US, ConstMap, StepModel, step_time_problem, usable_steps
from evaluator.scoring.baselines import baseline_models
from evaluator.scoring.score import (
    DEFAULT_LOSS_WEIGHTS,
    STEADY_KEYS,
    STEADY_WARMUP_S,
    RunMetrics,
    loss,
    request_latencies,
    run_loss,
    score_corpus,
    score_fit_set,
    steady_mask,
)
from evaluator.sim.corpus import Corpus, FitSet, build_fit_set
from evaluator.sim.sensitivity import DELTA as SENSITIVITY_DELTA
from evaluator.sim.sensitivity import e2e_response, scaled
from evaluator.sim.simulator import SimResult, simulate

__all__ = [
    "DEFAULT_LOSS_WEIGHTS",
    "FEATURES",
    "FEATURE_INDEX",
    "FEATURE_NAMES",
    "KERNEL_FEATURES",
    "LOOPS",
    "MAX_STEP_US",
    "N_FEATURES",
    "PEAK_FLOPS",
    "PINNED_ENV",
    "REQUEST_FIELDS",
    "REQUEST_FIELD_NAMES",
    "SENSITIVITY_DELTA",
    "STAT_INDEX",
    "STEADY_KEYS",
    "STEADY_WARMUP_S",
    "ConstMap",
    "Corpus",
    "DataError",
    "Evaluator",
    "ExperimentSpec",
    "FitSet",
    "ProbeBatches",
    "RunMetrics",
    "Scenario",
    "ServerFlags",
    "SimResult",
    "StepModel",
    "baseline_models",
    "data_dir",
    "e2e_response",
    "estimate_kv_pool",
    "experiment_dirs",
    "from_inference_perf",
    "from_tracev2",
    "limit_problem",
    "load_scenarios",
    "loss",
    "ordered_map",
    "parse_stages",
    "probe_batches",
    "prompt_period",
    "read_tracev2",
    "replay_command",
    "request_inputs",
    "request_latencies",
    "run_loss",
    "sampled_host_us",
    "sampled_steps",
    "scaled",
    "scenario_trace",
    "shell",
    "steady_mask",
    "step_time_problem",
    "unseen_scenarios",
    "usable_steps",
    "with_prompt_cache",
    "with_sim_options",
    "write_experiment",
    "write_tracev2",
]


T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Sequence[T], threads: int) -> Iterator[R]:
    """``fn`` of every item, in item order, computed in up to ``threads`` threads.

    Why: the compiled simulator releases the GIL, so independent simulations (runs,
    stage slices, a CMA-ES generation's candidates) run on several cores at once, and in
    order, so results do not depend on the thread count. A pool per call: a forked worker
    must not inherit a pool without its threads. On a stop (a signal in the caller) the
    items not yet started are dropped."""
    if threads <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(min(threads, len(items)))
    try:
        yield from pool.map(fn, items)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def with_sim_options(scenarios: Sequence[Scenario], step_noise: float = 0.0,
                     host_us_per_open: float = 0.0,
                     loss_weights: Mapping[str, float] | None = None,
                     host_floor_us: float | Mapping[str, float] = 0.0) -> list[Scenario]:
    """The scenarios with seeded step-time noise of sd(log) ``step_noise``, the what-if host
    cost ``host_us_per_open`` (µs per step per open request; :mod:`evaluator.sim.simulator`),
    the loss weights of the steady percentiles (``evaluator.scoring.score.
    DEFAULT_LOSS_WEIGHTS``' keys; None: the defaults) and the what-if floor under every step
    ``host_floor_us`` (µs for every run, or per run name with none for a run not named;
    :mod:`evaluator.data.host_time`)."""
    floors = ({s.name: float(host_floor_us) for s in scenarios}
              if isinstance(host_floor_us, (int, float)) else dict(host_floor_us))
    if step_noise < 0 or host_us_per_open < 0 or any(not v >= 0 for v in floors.values()):
        raise ValueError("step_noise, host_us_per_open and host_floor_us must be >= 0")
    weights = None if loss_weights is None else {k: float(v) for k, v in loss_weights.items()}
    return [replace(s, step_noise=float(step_noise), host_us_per_open=float(host_us_per_open),
                    host_floor_us=float(floors.get(s.name, 0.0)), loss_weights=weights)
            for s in scenarios]


class Evaluator:
    """Scenarios plus the corpora they were simulated into; scores models against them."""

    def __init__(self, scenarios: Sequence[Scenario]):
        self.scenarios = list(scenarios)
        self.by_name = {s.name: s for s in self.scenarios}
        self.corpora: dict[str, Corpus] = {}
        self.fit_sets: dict[str, FitSet] = {}
        self.corpus_version = ""
        # Closed-loop simulations run this many at a time, in threads (the compiled
        # simulator releases the GIL; each run is independent and deterministic, so the
        # results do not depend on it). The search sets it to its worker count: a job the
        # driver computes alone (a polish, a corpus refresh) and a worker's last job of a
        # generation then use the cores the other workers left idle.
        self.threads = 1

    @classmethod
    def from_data(cls, data: str | None = None, names: list[str] | None = None,
                  prompt_cache: bool = True, async_scheduling: bool = True,
                  loop: str = "vllm", step_noise: float = 0.0, host_us_per_open: float = 0.0,
                  loss_weights: Mapping[str, float] | None = None,
                  host_floor_us: float | Mapping[str, float] = 0.0) -> Evaluator:
        """The scenarios of a data directory; one with none is an error (every command
        that loads one would print an empty table and exit 0). ``prompt_cache``: simulate
        vLLM's prefix caching of whole repeated prompts (:mod:`evaluator.data.prompt_cache`); off,
        only the shared system prompts are cached. ``async_scheduling``: a busy engine forms
        each step while the previous one runs (vLLM's default since 0.14). ``loop``: the
        engine loop simulated (``LOOPS``: vllm, or blis for BLIS's). ``step_noise``,
        ``host_us_per_open``, ``loss_weights``, ``host_floor_us``: :func:`with_sim_options`."""
        scenarios = load_scenarios(data, names, prompt_cache, async_scheduling, loop)
        if not scenarios:
            raise DataError(f"{data_dir(data) / 'experiments'}: no experiments (`evolve "
                            "ingest` writes them; `evolve data` lists a directory)")
        return cls(with_sim_options(scenarios, step_noise, host_us_per_open, loss_weights,
                                    host_floor_us))

    def simulate(self, model: StepModel, consts: ConstMap,
                 names: Sequence[str] | None = None, record_members: bool = False,
                 progress: Callable[[str], None] | None = None,
                 threads: int | None = None) -> dict[str, SimResult]:
        """Closed-loop simulation of the named scenarios (all by default), in ``threads``
        threads (default :attr:`threads`; 1 from a caller that is itself threaded)."""
        todo = list(names or [s.name for s in self.scenarios])
        n_threads = self.threads if threads is None else threads

        def one(name: str) -> SimResult:
            return simulate(self.by_name[name], model,
                            np.asarray(consts[name], dtype=np.float64),
                            record_members=record_members)

        out: dict[str, SimResult] = {}
        for name, res in zip(todo, ordered_map(one, todo, n_threads), strict=True):
            out[name] = res
            if progress is not None:
                progress(name)
        return out

    def refresh_corpora(self, model: StepModel, consts: ConstMap, window_steps: int = 2000,
                        names: Sequence[str] | None = None,
                        progress: Callable[[str], None] | None = None,
                        strict: bool = False, measured: bool = True) -> str:
        """Re-simulate with ``model``; keep the corpora and their fitting subsamples.

        Returns the corpus version: a content hash of the corpora, stored with every
        evaluation so a score can be traced to the batches it was computed on. A
        simulation that failed (a bad step or queueing time, a stuck pool) leaves a cut-off
        corpus; ``strict`` refuses it (``ValueError`` naming the run, nothing kept), for
        corpora nothing better can replace (the first ones). Otherwise the caller judges
        them (the search scores them and keeps the old ones when the loss is infinite).
        ``measured=False``: fitting subsamples that read no measurement
        (:func:`evaluator.sim.corpus.build_fit_set`).
        """
        sims = self.simulate(model, consts, names, progress=progress)
        failed = [(n, r.error) for n, r in sims.items() if r.error]
        if strict and failed:
            raise ValueError(f"{failed[0][0]}: {failed[0][1]}")
        for name, res in sims.items():
            self.corpora[name] = res.corpus
            self.fit_sets[name] = build_fit_set(self.by_name[name], res.corpus, window_steps,
                                                measured)
        import hashlib

        h = hashlib.sha256()
        for name in sorted(self.corpora):
            h.update(name.encode())
            h.update(self.corpora[name].digest().encode())
        self.corpus_version = h.hexdigest()[:16]
        return self.corpus_version

    def score(self, model: StepModel, consts: ConstMap, names: Sequence[str] | None = None,
              full: bool = False) -> dict[str, RunMetrics]:
        """Teacher-forced metrics on the current corpora (fitting subsample unless ``full``)."""
        out: dict[str, RunMetrics] = {}
        for name in names or sorted(self.corpora):
            sc = self.by_name[name]
            c = np.asarray(consts[name], dtype=np.float64)
            if full:
                out[name] = score_corpus(sc, self.corpora[name], model, c)
            else:
                out[name] = score_fit_set(sc, self.fit_sets[name], model, c)
        return out

    def names(self, split: str | None = None) -> list[str]:
        return [s.name for s in self.scenarios if split is None or s.split == split]

