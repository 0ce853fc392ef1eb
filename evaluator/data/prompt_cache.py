"""Repeated prompts: which requests send the same prompt, inferred from their lengths.

Why: vLLM V1 caches every full 16-token block of a computed prompt (prefix caching, on by
default), so a request that repeats an earlier prompt computes only its last partial block.
The measured runs repeat prompts: inference-perf's shared-prefix generator draws a fixed
pool of prompts in order, request ``i`` sending prompt ``i mod P``. ``requests.json`` has
no prompt text, but the input lengths show the pool: in all 16 runs the length of request
``i`` equals that of ``i + 100`` for 97.6-99.7 % of requests (by chance, with 24-34
distinct lengths, about 5 %), and every length occurs a multiple of ``n / 100`` times.
The engine's own steps confirm the cache served them: in the three runs with sampled steps
(``steps/enriched_steps.parquet``), 15 prompt tokens per request were computed (the last
partial block and the token vLLM always recomputes) where the prompts hold 560-610.

A run whose lengths show no such period (a user trace with one fixed length, or random
prompts) gets no prompt ids: only its shared system prompts are cached, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from evaluator.data.scenarios import Scenario

MIN_MATCH = 0.9  # share of requests whose length equals that of the request P later
MAX_CHANCE = 0.5  # above this, equal lengths say nothing (near-constant lengths)
MAX_PERIOD = 1000
NEIGHBOURS = (-1, 1, -2, 2, -3, 3)  # slots a reordered request may have come from


def prompt_period(lengths: np.ndarray, known: np.ndarray | None = None) -> int:
    """The smallest period ``P`` with ``lengths[i] == lengths[i + P]`` for at least
    ``MIN_MATCH`` of the pairs whose lengths are both ``known``, or 0 when none (or when
    the lengths are too uniform for equal lengths to mean equal prompts)."""
    x = np.asarray(lengths, dtype=np.int64)
    ok = np.ones(x.shape[0], dtype=bool) if known is None else np.asarray(known, dtype=bool)
    n = int(ok.sum())
    if n < 3:
        return 0
    _, counts = np.unique(x[ok], return_counts=True)
    if float(np.sum((counts / n) ** 2)) > MAX_CHANCE:
        return 0
    for p in range(1, min(MAX_PERIOD, x.shape[0] // 3) + 1):
        both = ok[:-p] & ok[p:]
        if both.sum() >= n // 3 and float(np.mean(x[:-p][both] == x[p:][both])) >= MIN_MATCH:
            return p
    return 0


def with_prompt_cache(scenario: Scenario) -> Scenario:
    """``scenario`` with the prompt each request repeats, its shared system-prompt group
    tied to the prompt (a prompt has one system prompt), and the requests the client
    counted no input for (the failed ones: the loader gave them the median length) given
    their prompt's length; unchanged when the lengths show no period.

    A prompt is a slot of the pool (``i mod P``) and a length. A request whose length
    differs from its slot's (0.1-1 % of the bundled runs' requests) was reordered on the
    way: it sends the prompt of a nearby slot (``NEIGHBOURS``, nearest first) whose length
    it has (nearly all of them: most are two neighbours swapped), else a prompt of its own.
    """
    failed = scenario.measured.failed
    known = ~failed if failed.shape[0] == scenario.n_requests else None
    period = prompt_period(scenario.input_tokens, known)
    if period == 0:
        return scenario
    slot = np.arange(scenario.n_requests, dtype=np.int64) % period
    lengths = scenario.input_tokens.astype(np.int64).copy()
    seen = np.ones(lengths.shape[0], dtype=bool) if known is None else known
    canon = slot_lengths(lengths, slot, seen, period)
    unseen = ~seen & (canon[slot] >= 0)
    lengths[unseen] = canon[slot[unseen]]
    off = lengths != canon[slot]
    for d in NEIGHBOURS:
        near = (slot + d) % period
        hit = off & (lengths == canon[near])
        slot = np.where(hit, near, slot)
        off &= ~hit
    _, prompt = np.unique(slot * (int(lengths.max()) + 1) + lengths, return_inverse=True)
    groups = max(scenario.n_prefix_groups, 1)
    return replace(scenario, prompt_id=prompt.astype(np.int64), prefix_group=slot % groups,
                   input_tokens=lengths, meta={**scenario.meta, "prompt_period": period})


def slot_lengths(lengths: np.ndarray, slot: np.ndarray, seen: np.ndarray,
                 period: int) -> np.ndarray:
    """Each slot's prompt length: the most common length of its ``seen`` requests (ties:
    the shortest), -1 for a slot with none."""
    canon = np.full(period, -1, dtype=np.int64)
    for p in range(period):
        values, counts = np.unique(lengths[(slot == p) & seen], return_counts=True)
        if values.size:
            canon[p] = values[np.argmax(counts)]
    return canon
