"""Fitting a program's constants: one box, one CMA-ES driver, two objectives.

Why a package: both fits search the same normalised box with the same driver, penalty and
seeding, and differ only in what one evaluation costs:

* :mod:`~evolve.fitting.bounds`: the unit box <-> constants map, the scope policy (which
  scenarios share a constant vector), ``FitResult`` and the seed derivation;
* :mod:`~evolve.fitting.cmaes`: the CMA-ES driver over a population objective, with the
  failure penalty and the restart policy;
* :mod:`~evolve.fitting.teacher_forced`: the vectorised fitting-window loss and
  :func:`fit_program`, used for every candidate;
* :mod:`~evolve.fitting.closed_loop`: the simulation-backed loss on stage slices and
  :func:`closed_loop_fit`, the polish for the programs that matter;
* :mod:`~evolve.fitting.calibrate`: constants for a model nobody measured, fitted to a
  reference program's predictions rather than to measurements;
* :mod:`~evolve.fitting.loop_refit`: constants refitted for the engine loop an exported
  model runs in (BLIS's), closed loop against the measured runs.
"""

from __future__ import annotations

from evolve.fitting.bounds import (
    SCOPES,
    Box,
    FitResult,
    Scope,
    const_map,
    derived_seed,
    group_key,
)
from evolve.fitting.closed_loop import SliceObjective, closed_loop_fit, slice_evaluator
from evolve.fitting.cmaes import PENALTY, Minimum, PopulationObjective, minimize
from evolve.fitting.teacher_forced import (
    DEFAULT_MAX_EVALS,
    DEFAULT_RESTARTS,
    GroupObjective,
    fit_program,
)

__all__ = [
    "DEFAULT_MAX_EVALS",
    "DEFAULT_RESTARTS",
    "PENALTY",
    "SCOPES",
    "Box",
    "FitResult",
    "GroupObjective",
    "Minimum",
    "PopulationObjective",
    "Scope",
    "SliceObjective",
    "closed_loop_fit",
    "const_map",
    "derived_seed",
    "fit_program",
    "group_key",
    "minimize",
    "slice_evaluator",
]
