"""Closed-loop replica of vLLM v0.15.1's V1 scheduler, driven by a step-time model.

Requests enter at their measured arrival times (plus the model's queueing delay); each
engine step forms a batch exactly as ``vllm/v1/core/sched/scheduler.py::schedule`` does
for this configuration (FCFS, chunked prefill, prefix caching, no speculative decoding,
no LoRA, no KV connector), the model prices the batch, and the clock advances by that
duration. The batches and per-request step indices become the :class:`Corpus`.

Scheduling, per step (``token_budget = max_num_batched_tokens``):

1. *Running* requests, in order: each gets ``min(tokens not yet computed, budget)`` tokens
   (1 for a decode, the next chunk for an unfinished prefill). Its KV blocks are allocated
   for ``computed + new`` tokens; when the pool is short, the *last* running request is
   preempted (blocks freed, computed tokens reset, pushed to the *front* of the waiting
   queue), repeatedly, until the allocation fits or the request preempted itself.
2. Only if nothing was preempted this step: *waiting* requests, FCFS, while the budget is
   positive and fewer than ``max_num_seqs`` run. A new request's cached prefix (see below)
   counts as computed; it is scheduled ``min(remaining, budget)`` tokens if its blocks fit,
   otherwise admission stops for this step.
3. After the step: every request whose computed tokens reach its sequence end samples one
   token (the first token ends its prefill: TTFT); a request with all its output tokens
   finishes and frees its blocks.

Between steps, requests whose client deadline (arrival + 300 s, inference-perf's timeout)
has passed are aborted and freed; when nothing runs or waits, the clock jumps to the next
arrival.

Simplifications (each measured or argued to be small here):

* Prefix caching, of whole prompts: the measured runs cycle through a pool of 100 prompts
  (``evaluator/prompts.py`` infers it from the input lengths; the 0.1-1 % of requests
  reordered on the way get the prompt of the nearby slot whose length they have), so a
  request that repeats a prompt still cached hits all its full 16-token blocks but the
  last token (vLLM's cap), as the engine's sampled steps show (15 computed prompt tokens
  per request, where the replica computes 15-16; ``tests/evaluator/test_prompts.py``). A
  prompt's blocks are cached once its first request has computed them; nobody holding
  them, they are evicted whole, least recently released first, only when an allocation
  needs them (vLLM evicts block by block from one free queue in release order, which can
  evict a prompt earlier while the pool has room). A shared system prompt
  (``system_prompt_len`` tokens, groups tied to the prompt) hits for a prompt's first
  request and stays resident (under 2 % of the pool). ``--no-prompt-cache``
  (``run.prompt_cache``) caches the system prompts only, as evolve did before 2026-11-27.
  Input lengths do not grow across turns (data README trap 8).
* A preempted request recomputes its prompt and generated tokens as one prefill (vLLM's
  recompute preemption); its prefix hit is its prompt (generated blocks, which vLLM also
  keeps cached until evicted, are not).
* Async scheduling (vLLM's default since 0.14) is simulated by default
  (``--no-async-scheduling``, ``run.async_scheduling``, turns it off): a busy engine forms
  each step as the previous one begins, so a request arriving meanwhile joins a step later
  (an idle engine schedules it at once). Measured, mean TTFT is 3.0-3.5 mean decode
  intervals in every load stage of the 12 normal runs but one (Llama-2-70B ``general`` at
  20 rps: 5.5): half a step waiting, the step already formed, the prefill step, and the
  output's way back; without async scheduling the replica gives 1.5 steps and a constant
  ``queueing_time`` must stand for the rest, too short at a slow stage and too long at a
  fast one, and a fit then buys the TTFT of the fast stages with step time (the
  ``layered`` rule, measured: docs/selection.md).
* CUDA-graph padding, detokenisation and the API server are not simulated as such: their
  cost is whatever the step-time model and the E2E-only constants (``post_decode_us``,
  ``output_token_us``) and ``queueing_time`` absorb.
* A step's duration depends on its batch only (BLIS's ``StepTime`` signature). Measured
  against that, on the one overloaded run of the validate split (Mixtral ``reasoning``):
  with the batch full (127-128 running) from the first minute on, the decode interval of
  the requests that completed grows with how long they had waited, 31.3 ms for those
  admitted in the first 50 s, 35.7 ms at 150-200 s, 40.5 ms from 450 s on (mean TTFT
  2 s, 50 s, 179-240 s), while any batch-only model holds it flat. vLLM's scheduler does
  nothing per waiting request once ``max_num_seqs`` run (it stops at the first check).
  The engine's timing of its scheduling call (``step.duration_us``, ``steps/``) is 30-35 ms
  (median) over the end of that run, against 0.7 ms on Mixtral ``general``; on the three
  runs with step timestamps it never exceeds the step period (0 of 1,967 consecutive
  pairs) and grows to a quarter to a half of it at full batches. By the fork's source
  (inference-sim/vllm, ``Scheduler.schedule``) it is host time from the call's entry to
  its batch-summary event, with no GPU synchronisation in between, and nothing in it
  iterates the waiting queue; nor is it the abort path (a timed-out request's removal
  from the queue): the first client timeout of that run falls at 671 s, when the
  drift is complete. What lengthens it is not in the data. So those steps take
  at least 30-35 ms, and the simulation's steady steps 30-31.6 ms: the time is spent
  server side, not in the load generator. On the three training runs with step
  timestamps the call's median jumps from 0.2-0.4 ms below 40 running to 3-6 ms from
  56-72 running on, while the decode-only step period rises smoothly through the jump
  (70B ``general``: 18.9, 20.1, 20.8 ms at 40-56, 56-72, 72-88 running): async
  scheduling overlaps it with the GPU step, so training data cannot price it. Over the
  reasoning runs' sampled steps (three are the test split, read for this diagnosis only)
  it is 6.2 ms (7B), 12.5 ms (70B-hf), 26.1 ms (CodeLlama) and 32.0 ms (Mixtral); in the two
  TP2 runs that is 97 % and 87 % of the measured per-token interval (26.8, 36.9 ms), so
  those engines were close to bound by host time, which no step time of the batch follows.
  Not a neighbour's load: by the pod addresses (``results/config.yaml``) none of the other
  15 runs shared the Mixtral run's node. The fork's own step and request tracing
  (OpenTelemetry, exported by a thread of the same process) may be part of it. The
  cause is open, and only the validate run could price it; no term here.
  ``evolve validate`` prints the decode interval by admission time of every run that
  queues (``admission_drift`` in ``--json``), measured against simulated.
* Output length is the load profile's ``output_len`` for every request (``ignore_eos``;
  data README trap 4), also for requests that the client later aborted.

Differences from BLIS's batch formation are listed in ``docs/blis.md``. ``Scenario.loop =
"blis"`` (``--loop blis``) simulates BLIS's engine loop at the pinned commit instead, the
loop an exported model runs in: no async scheduling; a preempted request re-prefills its
input and decodes all its output again (TTFT re-timed); a newly admitted request's step
is priced as if nothing were cached (its ``ProgressIndex`` advances after ``StepTime``);
steps, queueing delays and the two per-request constants count whole µs; TTFT includes
``output_token_us`` (``evaluator/score.py``). What stays vLLM's: the prompt cache of whole
prompts (BLIS hashes token blocks; the exported traces make the two agree, docs/blis.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluator.components import ARCH_FIELDS
from evaluator.corpus import Corpus
from evaluator.glossary import N_STATS
from evaluator.model import MAX_STEP_US
from evaluator.scenarios import CLIENT_TIMEOUT_S, Scenario
from evaluator.scheduler import _STEP_SIG, ERR_BAD_STEP, ERR_STUCK, STEP_FN_TYPE, _run
from evaluator.score import RunMetrics, metrics_from_times, queue_delay

__all__ = ["STEP_FN_TYPE", "_STEP_SIG", "SimResult", "simulate"]


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
    out = _run(model.scalar_fn, consts, arch, np.ascontiguousarray(entry),
               np.ascontiguousarray(deadline), scenario.input_tokens.astype(np.int64),
               scenario.output_tokens.astype(np.int64), scenario.prefix_group.astype(np.int64),
               _prompts(scenario), order, int(shared), sv.max_num_seqs, sv.max_batched_tokens,
               sv.block_size, sv.kv_blocks, bool(record_members),
               bool(scenario.async_scheduling), scenario.loop == "blis")
    (n_steps, err, err_step, n_pre, stats, begin, end, admit, first, last, aborted,
     pre_cnt, kv_used, m_ptr, m_req, m_new, m_kv, m_pf, m_len) = out
    end_us = end[:n_steps].copy()
    sel = admit >= 0
    wait = np.zeros(scenario.n_requests)
    wait[sel] = np.maximum(begin[admit[sel]] - entry[sel], 0.0)
    corpus = Corpus(stats=stats[:, :n_steps].copy(), end_us=end_us,
                    arrival_us=scenario.arrival_us.copy(), queue_us=delay,
                    wait_us=wait,
                    admit_step=admit, first_step=first, last_step=last, aborted=aborted,
                    output_tokens=scenario.output_tokens.astype(np.int64),
                    preemptions=pre_cnt, kv_used=kv_used[:n_steps].copy())
    if record_members:
        nm = int(m_ptr[n_steps])
        corpus.member_ptr = m_ptr[: n_steps + 1].copy()
        corpus.member_req = m_req[:nm].copy()
        corpus.member_new = m_new[:nm].copy()
        corpus.member_kv = m_kv[:nm].copy()
        corpus.member_prefill = m_pf[:nm].copy()
        corpus.member_len = m_len[:nm].copy()
    error = ""
    if err == ERR_BAD_STEP:
        error = (f"step time not finite, positive and below {MAX_STEP_US:g} us at step "
                 f"{err_step}")
    elif err == ERR_STUCK:
        error = f"no request fits the KV pool at step {err_step}"
    metrics = metrics_from_times(scenario, corpus, corpus.end_us, consts, model, error)
    return SimResult(corpus=corpus, metrics=metrics, n_preemptions=int(n_pre), error=error)


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
