"""What every fit shares: the search box, the constant groups, the result and the seeds.

Why these live apart from the optimiser and the objectives:

* Both fits (teacher forced and closed loop) search the same normalised box ``[0, 1]^n``
  (:class:`Box`): coordinate ``i`` maps linearly onto ``[low_i, high_i]``, or
  logarithmically when ``0 < low_i`` and ``high_i / low_i > 100`` (overheads and
  efficiencies span decades; a linear box would waste the search).
* Scope decides which scenarios share one constant vector: ``global`` (all),
  ``per_model`` (one vector per ``scenario.model``), ``per_scenario``, or ``pooled``: one
  vector per model *plus* a ``"global"`` vector fitted on every run, each model's vector
  shrunk towards it by a penalty that is stronger the fewer training runs the model has
  (:func:`evolve.fitting.teacher_forced.fit_program`). A model with no group of its own
  (held out) gets the ``"global"`` vector. The search,
  the judging and the commands all map groups to scenarios through :func:`group_key` and
  :func:`const_map`, so the policy is written once.
* Determinism: every random stream is keyed by :func:`derived_seed` (sha256, never
  Python's salted ``hash()``), so the same run seed gives the same archive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from evaluator.api import ConstMap, Scenario
from evolve.program.language import Program
from evolve.text.words import FitStatus, Scope

SCOPES: tuple[str, ...] = tuple(Scope)


@dataclass
class FitResult:
    """Fitted constants per group, the official training loss and how the fit went.

    ``status``: ``ok``; ``no_improvement`` (no group beat its initial point); ``invalid``
    (some group found no constants giving valid outputs); ``no_constants``. The closed-loop
    fit reports only ``ok`` and ``no_improvement`` (see
    :func:`evolve.fitting.closed_loop.closed_loop_fit`). ``group_loss`` is ``inf`` for a
    group without a valid point: the optimiser's finite penalty never leaks out.
    """

    groups: dict[str, dict[str, float]]
    loss: float
    n_evals: int
    status: FitStatus
    init_loss: float = float("inf")
    group_status: dict[str, str] = field(default_factory=dict)
    group_loss: dict[str, float] = field(default_factory=dict)
    inert: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kept at their start


def group_key(scenario: Scenario, scope: str) -> str:
    """The constant group a scenario belongs to under ``scope``."""
    if scope == Scope.GLOBAL:
        return "global"
    if scope in (Scope.PER_MODEL, Scope.POOLED):
        return scenario.model
    if scope == Scope.PER_SCENARIO:
        return scenario.name
    raise ValueError(f"unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")


def const_map(program: Program, groups: Mapping[str, Mapping[str, float]],
              scenarios: Sequence[Scenario], scope: str,
              default: np.ndarray | None = None) -> ConstMap:
    """Constant vector per scenario name, in the program's constant order.

    A scenario whose group was not fitted gets the ``"global"`` group if there is one (a
    held-out model under ``pooled``), else ``default`` (the program's initial values if
    None; e.g. a validation run under ``per_scenario``).
    """
    names = program.const_names
    fallback = program.init_vector() if default is None else np.asarray(default, np.float64)
    out: dict[str, np.ndarray] = {}
    for sc in scenarios:
        g = groups.get(group_key(sc, scope))
        if g is None:
            g = groups.get("global")
        out[sc.name] = (np.array([g[n] for n in names], dtype=np.float64) if g is not None
                        else fallback.copy())
    return out


class Box:
    """The map between constants and CMA-ES's normalised ``[0, 1]`` coordinates.

    CMA-ES assumes one step size fits every coordinate; normalising the declared bounds
    (log-scaled where they span decades) makes that true.
    """

    def __init__(self, program: Program) -> None:
        self.low, self.high = program.bounds()
        self.log = (self.low > 0) & (self.high / np.where(self.low > 0, self.low, 1.0) > 100)
        self.lo_t = np.where(self.log, np.log(np.where(self.log, self.low, 1.0)), self.low)
        self.hi_t = np.where(self.log, np.log(np.where(self.log, self.high, 1.0)), self.high)

    @property
    def n(self) -> int:
        """Number of coordinates (the program's constants)."""
        return int(self.low.shape[0])

    def to_unit(self, v: np.ndarray) -> np.ndarray:
        """Constants to unit coordinates (values outside the bounds are clipped first)."""
        v = np.clip(v, self.low, self.high)
        t = np.where(self.log, np.log(np.where(self.log, v, 1.0)), v)
        return np.clip((t - self.lo_t) / (self.hi_t - self.lo_t), 0.0, 1.0)

    def from_unit(self, x: np.ndarray) -> np.ndarray:
        """Unit coordinates (..., n) to constants, clipped into the declared bounds.

        The edges map exactly onto ``low``/``high`` so a bound is reachable bit for bit.
        """
        x = np.clip(x, 0.0, 1.0)
        t = self.lo_t + x * (self.hi_t - self.lo_t)
        v = np.clip(np.where(self.log, np.exp(np.where(self.log, t, 0.0)), t), self.low,
                    self.high)
        return np.where(x >= 1.0, self.high, np.where(x <= 0.0, self.low, v))


def derived_seed(seed: int, group: str, restart: int) -> int:
    """A 64-bit seed for one (label, restart) stream: sha256, never Python's ``hash()``.

    ``group`` is a free label: the teacher-forced fit passes the group key, the closed-loop
    fit ``f"closed:{group}"``, so the two fits of one group draw independent streams.
    """
    h = hashlib.sha256(f"{int(seed)}|{group}|{restart}".encode()).digest()
    return int.from_bytes(h[:8], "little")
