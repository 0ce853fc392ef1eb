"""The fixed parts of a run that every evaluation needs, and the outcome of one evaluation.

Fitness (``fit.fitness``): constants are always fitted teacher forced (fast), but with
``closed_loop`` (the default) the program is then *judged* closed loop: every run that is
not queue-dominated is replaced by one slice per load stage (``Scenario.stage_slices``).
:func:`make_context` builds those slices once per run. Queue-dominated runs (measured mean
TTFT over 5 s: the overloaded reasoning runs) cannot be cut into stage slices (their
queues build up over the whole run); they are never in the default training split. In
the validate split they are simulated whole, closed loop (~0.1 s each), because selection
looks at them (``evolve.search.pareto``: the pick is made with the validate split in
view) and teacher forcing cannot price a queue. In the test split they keep cheap
teacher-forced metrics, stored for reporting only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluator.api import Evaluator, ProbeBatches, Scenario
from evolve.assess.physics import probes_for


@dataclass
class RunContext:
    """The fixed parts of a run that every evaluation needs."""

    evaluator: Evaluator
    splits: dict[str, str]  # scenario name -> train / validate / test
    scope: str
    window_steps: int
    max_evals: int
    restarts: int = 1
    starts: int = 1  # teacher-forced fits per program, the best judged closed loop is kept
    pool_strength: float = 0.5
    prior_strength: float = 1.0
    transfer_weight: float = 0.0  # search loss: price of transfer beyond the margin
    transfer_margin: float = 0.0  # (evolve.search.transfer); weight 0 = off
    probe: np.ndarray | None = None  # float64[N_FEATURES, n] fingerprint steps
    slices: Evaluator | None = None  # closed-loop fitness: stage slices of sliceable runs
    slice_parent: dict[str, str] = field(default_factory=dict)  # slice name -> run name
    full_runs: list[str] = field(default_factory=list)  # validate runs simulated whole
    probes: dict[str, ProbeBatches] = field(default_factory=dict)  # model -> physics probe

    @property
    def names(self) -> list[str]:
        return sorted(self.splits)

    @property
    def train(self) -> list[str]:
        return [n for n in self.names if self.splits[n] == "train"]


@dataclass
class Scored:
    """The outcome of fitting and/or scoring one program on the current corpora."""

    groups: dict[str, dict[str, float]] | None
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss: float = float("inf")  # search loss: training loss (+ transfer price if priced)
    n_evals: int = 0
    reason: str = ""  # empty if accepted
    val_loss: float = float("nan")  # the same loss over the validate runs; nan: none

    @property
    def ok(self) -> bool:
        return not self.reason and np.isfinite(self.loss)


QUEUE_DOMINATED_TTFT_S = 5.0


def sliced(sc: Scenario) -> bool:
    """Whether closed-loop fitness simulates ``sc`` in stage slices: not when its measured
    mean TTFT (or its absence) says it queues throughout, which a slice cannot price."""
    return not sc.measured.summary.get("ttft_mean", np.inf) >= QUEUE_DOMINATED_TTFT_S


def make_context(cfg: Any, evaluator: Evaluator, splits: dict[str, str]) -> RunContext:
    """The run context of a config: fitting knobs and, for closed-loop fitness, the slices."""
    ctx = RunContext(evaluator, dict(splits), cfg.fit.scope, cfg.fit.window_steps,
                     cfg.fit.max_evals, cfg.fit.restarts, cfg.fit.starts,
                     cfg.fit.pool_strength, cfg.fit.prior_strength,
                     cfg.fit.transfer_weight, cfg.fit.transfer_margin)
    if cfg.search.physics == "reject":
        ctx.probes = probes_for(evaluator, list(splits))
    if cfg.fit.fitness == "closed_loop":
        slices = []
        for name in sorted(splits):
            sc = evaluator.by_name[name]
            if not sliced(sc):
                if splits[name] == "validate":
                    ctx.full_runs.append(name)
                continue
            for sl in sc.stage_slices(cfg.fit.slice_seconds, cfg.fit.slice_warmup_seconds):
                slices.append(sl)
                ctx.slice_parent[sl.name] = name
        ctx.slices = Evaluator(slices)
    return ctx
