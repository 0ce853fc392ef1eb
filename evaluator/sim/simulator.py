"""Closed-loop replica of vLLM v0.15.1's V1 scheduler, driven by a step-time model.

Requests enter at their measured arrival times (plus the model's queueing delay); each
engine step forms a batch as ``vllm/v1/core/sched/scheduler.py::schedule`` does for this
configuration (FCFS, chunked prefill, prefix caching, no speculative decoding, no LoRA, no
KV connector), the model prices the batch, and the clock advances by that duration. The
batches and per-request step indices become the :class:`Corpus`.

Per step (``token_budget = max_num_batched_tokens``): running requests first, each its
next ``min(uncomputed, budget)`` tokens, the *last* one preempted (recompute, to the front
of the waiting queue) while the KV pool is short; then, only if nothing was preempted,
waiting requests FCFS while budget and ``max_num_seqs`` allow, a cached prefix counting as
computed; after the step, each request at its sequence end samples a token (the first:
TTFT). Between steps, requests past their client deadline (arrival + 300 s) are aborted.

Simplifications, each measured or argued small (docs/concepts/simulator.md; the
measurements: docs/notes/2026-11-26-host-time-under-overload.md): whole repeated prompts
cached, evicted whole (``--no-prompt-cache``: system prompts only); vLLM's async
scheduling (``--no-async-scheduling``); no CUDA-graph padding, detokenisation or API
server; a step's duration from its batch only (the overloaded runs' host-time drift is
not followed, unless ``Scenario.host_us_per_open`` prices it or ``Scenario.host_floor_us``
floors every step at the server's measured host time, both what-ifs); the load
profile's output length for every request; the measured server's cold start (its first
10-30 s are slow: the scorer's steady percentiles leave them out on both sides).

Step-time noise (``Scenario.step_noise`` = sigma): every step time is multiplied by
``exp(sigma z - sigma^2 / 2)`` (mean one), ``z`` iid standard normal, from a stream seeded
by the run's name (:func:`step_noise_factors`): the same inputs give the same outputs.
None in BLIS's loop (``run_step_noise``): BLIS's ``StepTime`` is deterministic.
Measured: sd of log(period / batch fit) 0.025-0.08 on the three runs with sampled steps,
no autocorrelation (docs/notes/2026-12-06-tails-and-overload.md). Teacher forcing on a
whole corpus applies the same factors step for step (``score_corpus``: it reproduces the
closed loop); on the fitting windows it prices the expected (noise-free) step time.

Differences from BLIS's batch formation are listed in ``docs/blis.md``. ``Scenario.loop =
"blis"`` (``--loop blis``) simulates BLIS's engine loop at the pinned commit instead, the
loop an exported model runs in: no async scheduling; a preempted request re-prefills its
input and decodes all its output again (TTFT re-timed); a newly admitted request's step
is priced as if nothing were cached (its ``ProgressIndex`` advances after ``StepTime``);
steps, queueing delays and the two per-request constants count whole µs; TTFT includes
``output_token_us`` (``evaluator/scoring/score.py``). What stays vLLM's: the prompt cache of whole
prompts (BLIS hashes token blocks; the exported traces make the two agree, docs/blis.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from evaluator.data.scenarios import CLIENT_TIMEOUT_S, Scenario
from evaluator.features.components import ARCH_FIELDS
from evaluator.features.glossary import N_STATS
from evaluator.model import MAX_STEP_US
from evaluator.scoring.score import (
    RunMetrics,
    metrics_from_times,
    queue_delay,
    run_step_noise,
    step_noise_factors,
)
from evaluator.sim.corpus import Corpus
from evaluator.sim.engine import _STEP_SIG, ERR_BAD_STEP, ERR_STUCK, STEP_FN_TYPE, _run

__all__ = ["STEP_FN_TYPE", "_STEP_SIG", "SimResult", "simulate"]


class EngineRun(NamedTuple):
    """What the engine kernel (:func:`evaluator.sim.engine._run`) returns, by name: arrays
    are per request, per step (``stats``, ``begin``, ``end``, ``kv_used``) or the batches'
    members (``m_*``, CSR by ``m_ptr``), allocated larger than used (cut at ``n_steps``)."""

    n_steps: int
    err: int
    err_step: int
    n_preemptions: int
    stats: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    admit: np.ndarray
    first: np.ndarray
    last: np.ndarray
    aborted: np.ndarray
    preemptions: np.ndarray
    kv_used: np.ndarray
    m_ptr: np.ndarray
    m_req: np.ndarray
    m_new: np.ndarray
    m_kv: np.ndarray
    m_prefill: np.ndarray
    m_len: np.ndarray


@dataclass
class SimResult:
    """A closed-loop simulation: its corpus, the official metrics, and diagnostics."""

    corpus: Corpus
    metrics: RunMetrics
    n_preemptions: int
    error: str = ""


def simulate(scenario: Scenario, model, consts: np.ndarray,
             record_members: bool = False) -> SimResult:
    """Run ``scenario`` closed loop with ``model`` (an ``evaluator.api.StepModel``)."""
    sv = scenario.server
    consts = np.ascontiguousarray(consts, dtype=np.float64)
    try:  # a bad queueing time is the program's result (invalid, the reason said), as a bad
        delay = queue_delay(scenario, model, consts)  # step time is; nothing to simulate
    except ValueError as exc:
        return _unsimulated(scenario, model, consts, str(exc))
    entry = scenario.arrival_us + delay
    order = np.argsort(entry, kind="stable").astype(np.int64)
    deadline = scenario.arrival_us + CLIENT_TIMEOUT_S * 1e6
    shared = scenario.system_prompt_len // sv.block_size if scenario.n_prefix_groups else 0
    arch = scenario.arch_vector  # without the kernel tables when unread (StepModel)
    if not model.reads_kernels:
        arch = arch[:len(ARCH_FIELDS)]
    out = EngineRun._make(_run(model.scalar_fn, consts, arch, np.ascontiguousarray(entry),
               np.ascontiguousarray(deadline), scenario.input_tokens.astype(np.int64),
               scenario.output_tokens.astype(np.int64), scenario.prefix_group.astype(np.int64),
               _prompts(scenario), order, int(shared), sv.max_num_seqs, sv.max_batched_tokens,
               sv.block_size, sv.kv_blocks, bool(record_members),
               bool(scenario.async_scheduling), scenario.loop == "blis",
               step_noise_factors(scenario.name, run_step_noise(scenario)),
               float(scenario.host_us_per_open), float(scenario.host_floor_us)))
    n_steps = int(out.n_steps)
    sel = out.admit >= 0
    wait = np.zeros(scenario.n_requests)
    wait[sel] = np.maximum(out.begin[out.admit[sel]] - entry[sel], 0.0)
    corpus = Corpus(stats=out.stats[:, :n_steps].copy(), end_us=out.end[:n_steps].copy(),
                    arrival_us=scenario.arrival_us.copy(), queue_us=delay,
                    wait_us=wait, admit_step=out.admit, first_step=out.first,
                    last_step=out.last, aborted=out.aborted,
                    output_tokens=scenario.output_tokens.astype(np.int64),
                    preemptions=out.preemptions, kv_used=out.kv_used[:n_steps].copy())
    if record_members:
        nm = int(out.m_ptr[n_steps])
        corpus.member_ptr = out.m_ptr[: n_steps + 1].copy()
        corpus.member_req = out.m_req[:nm].copy()
        corpus.member_new = out.m_new[:nm].copy()
        corpus.member_kv = out.m_kv[:nm].copy()
        corpus.member_prefill = out.m_prefill[:nm].copy()
        corpus.member_len = out.m_len[:nm].copy()
    error = ""
    if out.err == ERR_BAD_STEP:
        error = (f"step time not finite, positive and below {MAX_STEP_US:g} us at step "
                 f"{out.err_step}")
    elif out.err == ERR_STUCK:
        error = f"no request fits the KV pool at step {out.err_step}"
    metrics = metrics_from_times(scenario, corpus, corpus.end_us, consts, model, error)
    return SimResult(corpus=corpus, metrics=metrics, n_preemptions=int(out.n_preemptions),
                     error=error)


def _prompts(scenario: Scenario) -> np.ndarray:
    """Per request, the id of the prompt it repeats (-1: none, or prompt caching off)."""
    if scenario.prompt_id is None:
        return np.full(scenario.n_requests, -1, dtype=np.int64)
    return np.ascontiguousarray(scenario.prompt_id, dtype=np.int64)


def _unsimulated(scenario: Scenario, model, consts: np.ndarray, error: str) -> SimResult:
    """The invalid result of a run that could not start: no steps, every request unserved."""
    n = scenario.n_requests
    never = np.full(n, -1, dtype=np.int64)
    corpus = Corpus(stats=np.zeros((N_STATS, 0)), end_us=np.zeros(0),
                    arrival_us=scenario.arrival_us.copy(), queue_us=np.zeros(n),
                    wait_us=np.zeros(n), admit_step=never, first_step=never.copy(),
                    last_step=never.copy(), aborted=np.zeros(n, dtype=bool),
                    output_tokens=scenario.output_tokens.astype(np.int64),
                    preemptions=np.zeros(n, dtype=np.int64),
                    kv_used=np.zeros(0, dtype=np.int64))
    metrics = metrics_from_times(scenario, corpus, corpus.end_us, consts, model, error)
    return SimResult(corpus=corpus, metrics=metrics, n_preemptions=0, error=error)
