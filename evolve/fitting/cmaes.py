"""The one CMA-ES driver both fits use, with one failure penalty and one restart policy.

Why one driver: the teacher-forced fit (a vectorised loss, ~0.2 ms a candidate) and the
closed-loop fit (a simulation, ~0.1-0.5 s a candidate) differ only in their objective and
their knobs (step size, tolerances, budget, restarts, seed label). Everything that makes a
fit reproducible and comparable is here once:

* The objective is a *population* objective ``obj(X[P, n_const]) -> f[P]`` in constants
  (the driver maps CMA-ES's unit coordinates through :class:`~evolve.fitting.bounds.Box`),
  so a vectorised objective prices a whole generation in one pass and a per-candidate one
  loops over the rows in order.
* Invalid constants score :data:`PENALTY`: large but finite, since cma handles ``inf``
  poorly; it only ranks candidates (CMA-ES uses the order of the values, not their size).
  Callers report ``inf`` for a best value at or above it.
* Determinism: random numbers come from a ``numpy.random.Generator`` seeded by
  ``derived_seed(seed, label, restart)`` and handed to cma as its ``randn``; cma's own
  seeding of the global numpy RNG is switched off (``seed=nan``). No wall clock enters any
  decision.
* Budget: ``max_evals`` counts the start point; a generation is always evaluated whole,
  so the last one may overshoot the budget (it is accounted for in ``n_evals``).
* Restarts only on failure (no valid point, or no improvement on the start), each with a
  ``SIGMA_GROWTH`` times larger step size and a fresh stream, on the remaining budget.
* Best point: the first index of a generation's minimum, taken only if strictly below the
  best so far.
* cma does not support one dimension: the driver pads with a coordinate the loss ignores.
* The unit box: cma runs *without* its ``bounds`` option and the driver maps each
  generation into [0, 1] itself, through cma's own bound transform applied to the whole
  population at once (:class:`UnitBox`). Same numbers, bit for bit, as cma with
  ``bounds=[0, 1]`` (``tests/evolve/fitting/test_cmaes.py`` runs both), and faster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cma
import numpy as np

from evolve.fitting.bounds import Box, derived_seed
from evolve.text.words import FitStatus

PENALTY = 1e6  # loss of invalid constants: large but finite (cma handles inf poorly)
SIGMA_GROWTH = 1.5  # step-size factor per restart: a failed start may sit in a flat region

PopulationObjective = Callable[[np.ndarray], np.ndarray]
# cma's largest step per coordinate under bounds, as a fraction of the bounds' width
MAXSTD_BOUNDRANGE = float(cma.CMAOptions().eval("maxstd_boundrange"))


class UnitBox:
    """cma's transform of the box [0, 1], for a whole population in one call.

    Why not cma's ``bounds`` option: with it, cma maps every solution into the box one at a
    time in Python as it asks and looks it up again as it is told: ask and tell took
    0.84-0.87 ms a generation against 0.51-0.70 ms without bounds (5 constants, 8
    candidates), and fitting the ten seeds (pooled, with probes) 7.26 s against 6.59 s (best
    of three, alternated; pycma was a third of a teacher-forced fit's profile). Bounds
    change nothing else cma computes: it samples and adapts in unbounded genotype space
    either way. What they do set, the driver sets the same way: the mean starts at the
    transform's inverse of the start, and ``maxstd`` is the box's width times
    ``maxstd_boundrange``. The transform is elementwise and the same for every coordinate,
    so the flattened population goes through it exactly as each solution would.
    """

    def __init__(self) -> None:  # cma.BoundTransform: cma's public name since 3.x
        self._population = cma.BoundTransform([0.0, 1.0])
        self._start = cma.BoundTransform([0.0, 1.0])

    def genotype(self, u: np.ndarray) -> np.ndarray:
        """Where cma with bounds would start its mean for the unit point ``u``."""
        return np.asarray(self._start.inverse(np.array(u, dtype=np.float64)), np.float64)

    def maxstd(self, n: int) -> np.ndarray:
        """cma's default ``maxstd`` under bounds: the box's width times ``maxstd_boundrange``."""
        bt = self._start
        return (bt.get_bounds("upper", n) - bt.get_bounds("lower", n)) * MAXSTD_BOUNDRANGE

    def __call__(self, genotypes: np.ndarray) -> np.ndarray:
        """The unit points of the genotypes ``[P, n]``."""
        g = np.array(genotypes, dtype=np.float64)
        return np.asarray(self._population.repair(g.ravel()), np.float64).reshape(g.shape)


@dataclass(frozen=True)
class Minimum:
    """What one CMA-ES minimisation found.

    ``status``: ``ok`` (beat the start with a valid point), ``no_improvement`` or
    ``invalid`` (no valid point at all, ``f >= PENALTY``).
    """

    x: np.ndarray  # best constants (the start if nothing beat it)
    f: float  # objective at ``x``
    f0: float  # objective at the start
    n_evals: int
    status: FitStatus


def _status(f: float, f0: float) -> FitStatus:
    if f >= PENALTY:
        return FitStatus.INVALID
    if f >= f0:
        return FitStatus.NO_IMPROVEMENT
    return FitStatus.OK


def minimize(obj: PopulationObjective, box: Box, start: np.ndarray, *, seed: int,
             label: str, max_evals: int, sigma0: float, restarts: int = 0,
             tolerances: Mapping[str, float] | None = None,
             snap_start: bool = True, fixed: np.ndarray | None = None) -> Minimum:
    """Minimise ``obj`` over ``box`` from the constants ``start``.

    ``tolerances`` are extra cma options (``tolfun``, ``tolx``, ...). ``snap_start``: the
    start point is evaluated (and returned if nothing beats it) where the box maps it back
    (True, the teacher-forced fit from a program's initial values), or exactly as given
    (False, the closed-loop polish of constants already judged: a round trip through the
    log map may move them by an ulp). ``fixed`` (bool per constant): those keep their start
    value and CMA-ES searches only the others (:mod:`evolve.fitting.inert` says which).
    """
    start = np.asarray(start, dtype=np.float64)
    u0 = box.to_unit(start)
    mask = np.zeros(u0.shape[0], dtype=bool) if fixed is None else np.asarray(fixed, bool)
    live, frozen = np.flatnonzero(~mask), np.flatnonzero(mask)
    n = live.shape[0]
    x_start = box.from_unit(u0[None, :]) if snap_start else start[None, :].copy()
    x_start[0, frozen] = start[frozen]  # a fixed constant is never snapped

    def consts(U: np.ndarray) -> np.ndarray:  # fixed columns exactly as in the start
        X = box.from_unit(U)
        X[..., frozen] = x_start[0, frozen]
        return X

    f0 = float(obj(x_start)[0])
    best_u: np.ndarray | None = None  # None: the start is still the best point
    best_f, n_evals = f0, 1
    budget = max(max_evals - 1, 0) if n else 0
    unit = UnitBox()
    x0 = unit.genotype(np.array(list(u0[live]) + ([0.5] if n == 1 else [])))
    for restart in range(restarts + 1):
        if budget <= 0:
            break
        rng = np.random.default_rng(derived_seed(seed, label, restart))
        opts: dict[str, Any] = {
            "maxstd": unit.maxstd(x0.shape[0]), "maxfevals": budget, "seed": np.nan,
            "randn": lambda lam, k, _rng=rng: _rng.standard_normal((lam, k)),
            "verbose": -9, "verb_log": 0, "verb_disp": 0, **(tolerances or {})}
        es = cma.CMAEvolutionStrategy(list(x0), sigma0 * (SIGMA_GROWTH ** restart), opts)
        while not es.stop():
            sols = es.ask()  # genotypes; their unit points are what is evaluated
            xs = np.tile(u0, (len(sols), 1))
            xs[:, live] = unit(np.asarray(sols))[:, :n]
            fs = obj(consts(xs))
            es.tell(sols, [float(f) for f in fs])
            n_evals += len(xs)
            budget -= len(xs)
            i = int(np.argmin(fs))
            if fs[i] < best_f:
                best_u, best_f = xs[i].copy(), float(fs[i])
            if budget <= 0:
                break
        if best_f < f0 and best_f < PENALTY:
            break  # success: restart only on failure (no valid point, or no improvement)
    x = consts(best_u) if best_u is not None else x_start[0].copy()
    return Minimum(x=x, f=best_f, f0=f0, n_evals=n_evals, status=_status(best_f, f0))
