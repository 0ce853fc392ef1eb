"""Physics sanity of a fitted program, checked on synthetic batches rather than hoped for.

Why: the training runs (contexts under ~850 tokens) cannot tell a program that prices long
contexts from one that does not, and a search selects whatever fits them best. Before a
program may compete, its step time (with its fitted constants, per model) is evaluated on
:func:`evaluator.api.probe_batches` (decode batches of 1-128 requests at 128-4000 tokens of
context, prefill chunks, mixed steps) and must be:

1. finite and positive on every synthetic batch;
2. non-decreasing in context length (same requests and tokens) and in scheduled tokens
   (same context): more work never takes less time;
3. at long contexts (>= ``FLOOR_CONTEXT`` tokens) no faster than ``1 - FLOOR_MARGIN`` of
   the memory floor: reading the weights and the KV cache once at the GPU's peak HBM
   bandwidth (``weight_read + kv_read``). No step can move its bytes faster, so a program
   that undercuts this has dropped the cost that long contexts make large (the failure
   that left picks 61-81 % low on the reasoning runs). The compute floor (GEMMs and
   attention at peak FLOP/s) is *not* enforced: prefill is a small share of the measured
   steps, and the prefill coefficients fitted on them, BLIS's published 0.15 included,
   sit below it; enforcing it would reject the published model for long prefill chunks
   that these runs never show.
4. at long contexts, *priced by the context it adds*: along every "more context" pair of
   decode-only batches whose shorter member already has ``FLOOR_CONTEXT`` tokens, the step
   time must grow by at least ``1 - FLOOR_MARGIN`` of what the measured decode-attention
   kernel grows by (``k_dc_attn``: H100 microbenchmarks of exactly the model's shapes,
   1.0-1.15 x the KV read at peak bandwidth there). Check 3 bounds the level, which a
   large fitted per-step constant meets while the context slope is near zero; the slope
   is what decides whether a long-context run overloads (the reasoning runs need about
   22 ms per 128-request step for that), and short-context training runs cannot pin it,
   because their contexts (560-900 tokens) move in step with batch size. Fitted without
   this check, the `transfer` seed's KV coefficient fell from BLIS's published 1.95 to
   0.06-0.8 and three of four reasoning runs stopped queueing. Mixed and prefill batches
   are not held to it: a roofline ``max(compute, memory)`` hides the context of a mixed
   step behind its prefill GEMMs, and prefill attention over cached context is a small
   share of these runs' steps (BLIS's published prefill terms price FLOPs only).

A violation is a rejection with its reason stored (``evolve show`` prints it). No test or
validate run is touched: the batches are synthetic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evaluator.api import (
    FEATURE_INDEX,
    MAX_STEP_US,
    Evaluator,
    ProbeBatches,
    StepModel,
    probe_batches,
    usable_steps,
)

FLOOR_CONTEXT = 1024.0
FLOOR_MARGIN = 0.10
REL_TOL = 1e-9  # float noise allowed in "non-decreasing"
_MEMORY = ("weight_read", "kv_read")


def physical_floor(features: np.ndarray) -> np.ndarray:
    """Per step: weights + KV cache read once at peak HBM bandwidth, in µs."""
    return np.asarray(sum(features[FEATURE_INDEX[n]] for n in _MEMORY), dtype=np.float64)


def probes_for(evaluator: Evaluator, names: Sequence[str]) -> dict[str, ProbeBatches]:
    """One synthetic probe grid per model among the named runs (the search's, `evolve
    fit`'s and `evolve generalize`'s physics penalty all read these)."""
    probes: dict[str, ProbeBatches] = {}
    for name in sorted(names):
        sc = evaluator.by_name[name]
        if sc.model not in probes:
            probes[sc.model] = probe_batches(sc)
    return probes


def long_context_pairs(probe: ProbeBatches) -> tuple[np.ndarray, np.ndarray]:
    """The decode-only "more context" pairs at long context where the measured decode
    attention grows, and the time it adds, in µs."""
    f = probe.features
    a, b = probe.more_context[:, 0], probe.more_context[:, 1]
    prefill = f[FEATURE_INDEX["prefill_tokens"]]
    kernel = f[FEATURE_INDEX["k_dc_attn"]]
    added = kernel[b] - kernel[a]
    keep = ((probe.context[a] >= FLOOR_CONTEXT) & (prefill[a] == 0.0) & (prefill[b] == 0.0)
            & (added > 0.0))
    return probe.more_context[keep], added[keep]


def context_price(model: StepModel, consts: np.ndarray, probe: ProbeBatches) -> float:
    """How steeply ``model`` prices long contexts against the hardware: along the
    long-context decode pairs, the step time it adds, summed, over what the measured
    decode-attention kernel adds (1.0: as the kernel; nan without such pairs).

    Why a number of its own: check 4 sets a floor on the slope and nothing caps it, so a
    program fitted on short contexts may price context at any multiple of the kernel
    (docs/selection.md says why there is no ceiling); this says which multiple it chose.
    Summed rather than per pair: a bytes-based KV term grows linearly where the kernel
    is flat (a few short requests), so single pairs overstate it.
    """
    pairs, added = long_context_pairs(probe)
    if not added.size:
        return float("nan")
    t = probe_times(model, consts, probe)
    with np.errstate(all="ignore"):  # inf - inf of a broken program: nan, not a warning
        return float((t[pairs[:, 1]] - t[pairs[:, 0]]).sum() / added.sum())


def probe_times(model: StepModel, consts: np.ndarray, probe: ProbeBatches) -> np.ndarray:
    """The step time of every synthetic batch of ``probe`` (µs; numeric errors as nan/inf,
    not warnings: judging them is the caller's job)."""
    n = probe.features.shape[1]
    with np.errstate(all="ignore"):
        return np.broadcast_to(np.asarray(model.vector_fn(probe.features, consts),
                                          dtype=np.float64), (n,))


def violation(model: StepModel, consts: np.ndarray, probe: ProbeBatches) -> str | None:
    """Why ``model`` with constants ``consts`` breaks physics on ``probe``, or None."""
    t = probe_times(model, consts, probe)
    bad = np.flatnonzero(~usable_steps(t))  # the rule every place that runs a program keeps
    if bad.size:
        j = int(bad[0])
        return (f"step time {float(t[j])!r} us on '{probe.label[j]}' is not finite, "
                f"positive and below {MAX_STEP_US:g} us")
    for pairs, what in ((probe.more_context, "context"),
                        (probe.more_tokens, "scheduled tokens")):
        a, b = pairs[:, 0], pairs[:, 1]
        drop = np.flatnonzero(t[b] < t[a] * (1.0 - REL_TOL))
        if drop.size:
            i, j = int(a[drop[0]]), int(b[drop[0]])
            return (f"step time falls with more {what}: {t[i]:.1f} us on '{probe.label[i]}' "
                    f"> {t[j]:.1f} us on '{probe.label[j]}'")
    floor = physical_floor(probe.features)
    under = np.flatnonzero((probe.context >= FLOOR_CONTEXT)
                           & (t < (1.0 - FLOOR_MARGIN) * floor))
    if under.size:
        j = int(under[np.argmax(floor[under] / t[under])])
        return (f"step time {t[j]:.1f} us on '{probe.label[j]}' undercuts the physical floor "
                f"{floor[j]:.1f} us (weights + KV cache read at peak bandwidth) by "
                f"more than {FLOOR_MARGIN:.0%}")
    pairs, added = long_context_pairs(probe)
    grow = t[pairs[:, 1]] - t[pairs[:, 0]]
    short = np.flatnonzero(grow < (1.0 - FLOOR_MARGIN) * added)
    if short.size:
        k = int(short[np.argmax((added[short] - grow[short]) / added[short])])
        i, j = int(pairs[k, 0]), int(pairs[k, 1])
        return (f"step time grows by {grow[k]:.1f} us from '{probe.label[i]}' to "
                f"'{probe.label[j]}', less than {1.0 - FLOOR_MARGIN:.0%} of the "
                f"{added[k]:.1f} us the measured decode-attention kernel adds")
    return None


def by_model(evaluator: Evaluator, consts: Mapping[str, np.ndarray],
             names: Sequence[str]) -> dict[str, np.ndarray]:
    """Each model's constants (those of its first run among ``names``), as :func:`check`
    reads them: the probes are per model."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        out.setdefault(evaluator.by_name[name].model, consts[name])
    return out


def check(model: StepModel, consts_by_model: Mapping[str, np.ndarray],
          probes: Mapping[str, ProbeBatches]) -> str | None:
    """The first violation over the models (sorted by name), prefixed with the model."""
    for name in sorted(probes):
        if name not in consts_by_model:
            continue
        why = violation(model, consts_by_model[name], probes[name])
        if why:
            return f"physics ({name}): {why}"
    return None


def population_step_times(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], F: np.ndarray,
                          X: np.ndarray) -> np.ndarray:
    """Step times ``T[P, m]`` of constant rows ``X[P, n]`` on features ``F[:, m]``: one
    call with the population axis, or a row at a time for a program without support for it
    (the physics penalty and :mod:`evolve.fitting.inert` price candidates this way)."""
    P, m = X.shape[0], F.shape[1]
    with np.errstate(all="ignore"):
        T = np.asarray(fn(F, np.ascontiguousarray(X.T)[:, :, None]), dtype=np.float64)
        if T.shape != (P, m):
            T = np.stack([np.broadcast_to(np.asarray(fn(F, x), np.float64), (m,)) for x in X])
    return T


FIT_MARGIN = 0.05  # the fit aims inside the hard check's margin, so fitted programs pass it
FIT_WEIGHT = 10.0  # loss units per unit of relative violation: a 10 % breach costs 1.0


class PhysicsPenalty:
    """A soft form of :func:`violation` for the constant fit: ``pen(X[P, n]) -> [P]``.

    Why in the fit too: a hard check after fitting rejects a program whose *fitted*
    constants break physics, even when other constants of the same program would not; the
    fit, which only sees short-context training batches, has no reason to prefer them.
    Adding ``FIT_WEIGHT * (worst relative undercut of the floor + worst relative drop
    along a monotonicity pair + worst relative shortfall of the long-context slope)`` to
    the fitting loss steers CMA-ES to physical constants
    where the program has any; non-finite or non-positive probe step times cost
    ``invalid`` (the optimiser's penalty).
    """

    def __init__(self, model: StepModel, probes: list[ProbeBatches], invalid: float) -> None:
        self.fn = model.vector_fn
        self.invalid = invalid
        self.F = np.ascontiguousarray(np.concatenate([p.features for p in probes], axis=1))
        floor = np.concatenate([physical_floor(p.features) for p in probes])
        context = np.concatenate([p.context for p in probes])
        self.long = np.flatnonzero(context >= FLOOR_CONTEXT)
        self.floor = floor[self.long]
        pairs, slope, added, offset = [], [], [], 0
        for p in probes:
            pairs += [p.more_context + offset, p.more_tokens + offset]
            lp, gain = long_context_pairs(p)
            slope.append(lp + offset)
            added.append(gain)
            offset += p.features.shape[1]
        both, long_pairs = np.concatenate(pairs), np.concatenate(slope)
        self.a, self.b = both[:, 0], both[:, 1]
        self.la, self.lb = long_pairs[:, 0], long_pairs[:, 1]
        self.added = np.concatenate(added)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        with np.errstate(all="ignore"):
            T = population_step_times(self.fn, self.F, X)
            bad = ~np.all(usable_steps(T), axis=1)  # violation()'s first rule
            under = np.maximum((1.0 - FIT_MARGIN) * self.floor - T[:, self.long], 0.0)
            under = (under / self.floor).max(axis=1, initial=0.0)
            drop = np.maximum(T[:, self.a] - T[:, self.b], 0.0) / T[:, self.a]
            drop = drop.max(axis=1, initial=0.0)
            grow = T[:, self.lb] - T[:, self.la]
            short = np.maximum((1.0 - FIT_MARGIN) * self.added - grow, 0.0) / self.added
            short = short.max(axis=1, initial=0.0)
            pen = FIT_WEIGHT * (under + drop + short)
        return np.where(bad | ~np.isfinite(pen), self.invalid, pen)
