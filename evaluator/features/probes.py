"""Synthetic batches: the features of steps nobody measured, to probe a model's physics.

Why: the measured runs cover short contexts (under ~850 tokens) and moderate batches, so a
fitted model can be anything outside them. A capacity planner asks exactly there. This
module builds, for one scenario's model and GPU, a grid of batches that spans what vLLM
can schedule with ``max_model_len = 4096`` and a 2048-token budget:

* decode batches: ``B`` requests in {1, 4, 16, 64, 128} at context ``L`` in
  {128, 512, 1024, 2048, 3072, 4000} tokens each;
* single prefill chunks: ``t`` in {16, 128, 512, 2048} tokens at cached context ``k`` in
  {0, 512, 1024, 2048} (``k + t <= 4096``);
* mixed steps: each decode batch plus one 512-token prefill chunk at context 0.

and the pairs of batches that differ in one direction only: more context per request
(same requests and tokens), or more scheduled tokens (same context). A physical step time
is positive and non-decreasing along both (``evolve.assess.physics`` checks it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from evaluator.data.scenarios import Scenario
from evaluator.features.components import compute_features
from evaluator.features.glossary import N_STATS, STAT_INDEX

DECODE_BATCH = (1, 4, 16, 64, 128)
DECODE_CONTEXT = (128, 512, 1024, 2048, 3072, 4000)
PREFILL_CHUNK = (16, 128, 512, 2048)
PREFILL_CONTEXT = (0, 512, 1024, 2048)
MIXED_CHUNK = 512
MAX_LEN = 4096


@dataclass(frozen=True)
class ProbeBatches:
    """Synthetic steps of one model/GPU and the monotonicity pairs between them.

    ``features[N_FEATURES, n]``; per step: ``label`` (e.g. ``decode B=64 L=2048``),
    ``context`` (longest context in the step); ``more_context[m, 2]`` and
    ``more_tokens[m, 2]``: index pairs ``(a, b)`` where step ``b`` has more context, or
    more scheduled tokens, than step ``a`` and is otherwise the same.
    """

    features: np.ndarray
    label: tuple[str, ...]
    context: np.ndarray
    more_context: np.ndarray
    more_tokens: np.ndarray


def _stats(decode: tuple[int, int] | None, prefill: tuple[int, int] | None) -> np.ndarray:
    """One step's statistics: ``decode = (B, L)``, ``prefill = (t, k)`` (one request)."""
    s = np.zeros(N_STATS)
    kv_max = 0.0
    if decode is not None:
        b, ctx = decode
        s[STAT_INDEX["n_decode"]] = b
        s[STAT_INDEX["decode_tokens"]] = b
        s[STAT_INDEX["dc_kv_sum"]] = b * ctx
        kv_max = ctx + 1.0
    if prefill is not None:
        t, k = prefill
        s[STAT_INDEX["n_prefill"]] = 1
        s[STAT_INDEX["prefill_tokens"]] = t
        s[STAT_INDEX["pf_attn_pairs"]] = t * (k + (t + 1) / 2.0)
        s[STAT_INDEX["pf_kv_ctx"]] = k + t
        s[STAT_INDEX["blis_pf_attn"]] = t * ((k + t) + t / 2.0)
        kv_max = max(kv_max, float(k + t))
    s[STAT_INDEX["kv_max"]] = kv_max
    return s


def probe_batches(scenario: Scenario) -> ProbeBatches:
    """The synthetic grid for ``scenario``'s model, GPU and TP degree."""
    cols: list[np.ndarray] = []
    labels: list[str] = []
    context: list[float] = []
    index: dict[tuple, int] = {}

    def add(key: tuple, decode: tuple[int, int] | None, prefill: tuple[int, int] | None,
            label: str, ctx: float) -> None:
        index[key] = len(cols)
        cols.append(_stats(decode, prefill))
        labels.append(label)
        context.append(ctx)

    for b in DECODE_BATCH:
        for ctx in DECODE_CONTEXT:
            add(("d", b, ctx), (b, ctx), None, f"decode B={b} L={ctx}", ctx)
            add(("m", b, ctx), (b, ctx), (MIXED_CHUNK, 0),
                f"decode B={b} L={ctx} + prefill {MIXED_CHUNK}", ctx)
    for t in PREFILL_CHUNK:
        for k in PREFILL_CONTEXT:
            if k + t <= MAX_LEN:
                add(("p", t, k), None, (t, k), f"prefill t={t} k={k}", k + t)
    more_ctx: list[tuple[int, int]] = []
    more_tok: list[tuple[int, int]] = []
    for kind in ("d", "m"):
        for b in DECODE_BATCH:
            for lo, hi in itertools.pairwise(DECODE_CONTEXT):
                more_ctx.append((index[(kind, b, lo)], index[(kind, b, hi)]))
        for ctx in DECODE_CONTEXT:
            for lo, hi in itertools.pairwise(DECODE_BATCH):
                more_tok.append((index[(kind, lo, ctx)], index[(kind, hi, ctx)]))
    for b in DECODE_BATCH:  # a prefill chunk added to a decode batch
        for ctx in DECODE_CONTEXT:
            more_tok.append((index[("d", b, ctx)], index[("m", b, ctx)]))
    for t in PREFILL_CHUNK:
        for lo, hi in itertools.pairwise(PREFILL_CONTEXT):
            if ("p", t, hi) in index:
                more_ctx.append((index[("p", t, lo)], index[("p", t, hi)]))
    for k in PREFILL_CONTEXT:
        for lo, hi in itertools.pairwise(PREFILL_CHUNK):
            if ("p", hi, k) in index:
                more_tok.append((index[("p", lo, k)], index[("p", hi, k)]))
    stats = np.ascontiguousarray(np.stack(cols, axis=1))
    return ProbeBatches(features=compute_features(stats, scenario.arch_vector),
                        label=tuple(labels), context=np.asarray(context, dtype=np.float64),
                        more_context=np.asarray(more_ctx, dtype=np.int64),
                        more_tokens=np.asarray(more_tok, dtype=np.int64))
