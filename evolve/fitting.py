"""Fit a program's constants with CMA-ES on the teacher-forced training loss.

Why it looks like this:

* CMA-ES (``cma``) searches a normalised box ``[0, 1]^n``: coordinate ``i`` maps linearly
  onto ``[low_i, high_i]``, or logarithmically when ``0 < low_i`` and ``high_i / low_i >
  100`` (overheads and efficiencies span decades; a linear box would waste the search).
* Scope decides which scenarios share one constant vector: ``global`` (all),
  ``per_model`` (one vector per ``scenario.model``) or ``per_scenario``. Per-model and
  per-scenario vectors are fitted by independent CMA-ES runs on each group's own training
  runs (the loss separates, so a joint fit would only be slower).
* Speed: the loss is evaluated hundreds of times, so :mod:`evolve.fit_objective` computes it
  for a whole CMA-ES population in one vectorised pass over precomputed windows; it equals
  ``evaluator.api.loss(evaluator.score(...))`` (tested). The reported ``FitResult.loss`` is
  recomputed through the evaluator's own scoring.
* Determinism: random numbers come from a ``numpy.random.Generator`` seeded from
  ``(seed, group, restart)`` and handed to cma as its ``randn``; cma's own seeding of the
  global numpy RNG is switched off (``seed=nan``). No wall clock enters any decision.
* Invalid constants (non-finite or non-positive step times, bad queueing delays) score a
  large finite penalty, since cma handles ``inf`` poorly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import cma
import numpy as np

from evaluator.api import ConstMap, Evaluator, Scenario, loss
from evolve.codegen import step_model
from evolve.fit_objective import PENALTY, GroupObjective
from evolve.language import Program

Scope = Literal["global", "per_model", "per_scenario"]
SCOPES: tuple[str, ...] = ("global", "per_model", "per_scenario")
DEFAULT_MAX_EVALS = 1500
DEFAULT_RESTARTS = 2
SIGMA0 = 0.1  # initial step size in the normalised box (0.1 beat 0.2 and 0.3 on the seeds)


@dataclass
class FitResult:
    """Fitted constants per group, the official training loss and how the fit went.

    ``status``: ``ok``; ``no_improvement`` (no group beat its initial point); ``invalid``
    (some group found no constants giving valid outputs); ``no_constants``.
    """

    groups: dict[str, dict[str, float]]
    loss: float
    n_evals: int
    status: str
    init_loss: float = float("inf")
    group_status: dict[str, str] = field(default_factory=dict)
    group_loss: dict[str, float] = field(default_factory=dict)


def group_key(scenario: Scenario, scope: str) -> str:
    """The constant group a scenario belongs to under ``scope``."""
    if scope == "global":
        return "global"
    if scope == "per_model":
        return scenario.model
    if scope == "per_scenario":
        return scenario.name
    raise ValueError(f"unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")


def const_map(program: Program, groups: Mapping[str, Mapping[str, float]],
              scenarios: Sequence[Scenario], scope: str,
              default: np.ndarray | None = None) -> ConstMap:
    """Constant vector per scenario name, in the program's constant order.

    A scenario whose group was not fitted (e.g. a validation run under ``per_scenario``)
    gets ``default`` (the program's initial values if None).
    """
    names = program.const_names
    fallback = program.init_vector() if default is None else np.asarray(default, np.float64)
    out: dict[str, np.ndarray] = {}
    for sc in scenarios:
        g = groups.get(group_key(sc, scope))
        out[sc.name] = (np.array([g[n] for n in names], dtype=np.float64) if g is not None
                        else fallback.copy())
    return out


class Box:
    """The map between constants and CMA-ES's normalised ``[0, 1]`` coordinates."""

    def __init__(self, program: Program):
        self.low, self.high = program.bounds()
        self.log = (self.low > 0) & (self.high / np.where(self.low > 0, self.low, 1.0) > 100)
        self.lo_t = np.where(self.log, np.log(np.where(self.log, self.low, 1.0)), self.low)
        self.hi_t = np.where(self.log, np.log(np.where(self.log, self.high, 1.0)), self.high)

    def to_unit(self, v: np.ndarray) -> np.ndarray:
        """Constants to unit coordinates (values outside the bounds are clipped first)."""
        v = np.clip(v, self.low, self.high)
        t = np.where(self.log, np.log(np.where(self.log, v, 1.0)), v)
        return np.clip((t - self.lo_t) / (self.hi_t - self.lo_t), 0.0, 1.0)

    def from_unit(self, x: np.ndarray) -> np.ndarray:
        """Unit coordinates (..., n) to constants, clipped into the declared bounds."""
        x = np.clip(x, 0.0, 1.0)
        t = self.lo_t + x * (self.hi_t - self.lo_t)
        v = np.clip(np.where(self.log, np.exp(np.where(self.log, t, 0.0)), t), self.low,
                    self.high)
        return np.where(x >= 1.0, self.high, np.where(x <= 0.0, self.low, v))


def derived_seed(seed: int, group: str, restart: int) -> int:
    """A 64-bit seed for one (group, restart) stream: sha256, never Python's ``hash()``."""
    h = hashlib.sha256(f"{int(seed)}|{group}|{restart}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def _cma_fit(obj: GroupObjective, box: Box, x0_const: np.ndarray, seed: int, group: str,
             max_evals: int, restarts: int) -> tuple[np.ndarray, float, float, int, str]:
    """Minimise ``obj`` over the box; returns (best constants, best loss, initial loss,
    evaluations, status)."""
    x0 = box.to_unit(x0_const)
    n = x0.shape[0]
    f0 = float(obj(box.from_unit(x0[None, :]))[0])
    best_x, best_f, n_evals = x0, f0, 1
    budget = max(max_evals - 1, 0)
    for restart in range(restarts + 1):
        if budget <= 0:
            break
        rng = np.random.default_rng(derived_seed(seed, group, restart))
        opts = {"bounds": [0.0, 1.0], "maxfevals": budget, "seed": np.nan,
                "randn": lambda lam, n, _rng=rng: _rng.standard_normal((lam, n)),
                "verbose": -9, "verb_log": 0, "verb_disp": 0, "tolfun": 1e-7,
                "tolx": 1e-6, "tolstagnation": 60}
        # cma does not support one dimension: pad with a coordinate the loss ignores
        start = list(x0) + ([0.5] if n == 1 else [])
        es = cma.CMAEvolutionStrategy(start, SIGMA0 * (1.5 ** restart), opts)
        while not es.stop():
            sols = es.ask()
            xs = np.asarray(sols)[:, :n]
            fs = obj(box.from_unit(xs))
            es.tell(sols, [float(f) for f in fs])
            n_evals += len(xs)
            budget -= len(xs)
            i = int(np.argmin(fs))
            if fs[i] < best_f:
                best_x, best_f = xs[i].copy(), float(fs[i])
            if budget <= 0:
                break
        if best_f < f0 and best_f < PENALTY:
            break  # success: restart only on failure (no valid point, or no improvement)
    if best_f >= PENALTY:
        status = "invalid"
    elif best_f >= f0:
        status = "no_improvement"
    else:
        status = "ok"
    return box.from_unit(best_x), best_f, f0, n_evals, status


def fit_program(program: Program, evaluator: Evaluator, names: Sequence[str], scope: str,
                seed: int, max_evals: int = DEFAULT_MAX_EVALS,
                restarts: int = DEFAULT_RESTARTS) -> FitResult:
    """Fit ``program``'s constants on the named scenarios' fitting windows.

    ``max_evals`` and ``restarts`` are per constant group. The evaluator's corpora must have
    been refreshed (``evaluator.refresh_corpora``) for every named scenario.
    """
    names = list(names)
    if not names:
        raise ValueError("fit_program needs at least one scenario name")
    missing = [n for n in names if n not in evaluator.fit_sets]
    if missing:
        raise ValueError(f"no fitting corpus for {missing[0]!r}: refresh_corpora first")
    model = step_model(program)
    scenarios = [evaluator.by_name[n] for n in names]
    members: dict[str, list[Scenario]] = {}
    for sc in scenarios:
        members.setdefault(group_key(sc, scope), []).append(sc)
    box = Box(program)
    init = program.init_vector()
    groups: dict[str, dict[str, float]] = {}
    g_status: dict[str, str] = {}
    g_loss: dict[str, float] = {}
    n_evals = 0
    for g in sorted(members):
        obj = GroupObjective(program, model, evaluator, members[g])
        if program.n_constants == 0:
            x, f, st, n = init, float(obj(init[None, :])[0]), "no_constants", 1
        else:
            x, f, _f0, n, st = _cma_fit(obj, box, init, seed, g, max_evals, restarts)
        groups[g] = {k: float(v) for k, v in zip(program.const_names, x, strict=True)}
        g_status[g], g_loss[g] = st, (f if f < PENALTY else float("inf"))
        n_evals += n
    init_map = const_map(program, {}, scenarios, scope)
    init_loss = loss(evaluator.score(model, init_map, names), names)
    final = loss(evaluator.score(model, const_map(program, groups, scenarios, scope), names),
                 names)
    statuses = set(g_status.values())
    if "no_constants" in statuses:
        status = "no_constants"
    elif "invalid" in statuses:
        status = "invalid"
    elif statuses == {"no_improvement"}:
        status = "no_improvement"
    else:
        status = "ok"
    return FitResult(groups=groups, loss=final, n_evals=n_evals, status=status,
                     init_loss=init_loss, group_status=g_status, group_loss=g_loss)
