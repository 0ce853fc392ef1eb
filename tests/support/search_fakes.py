"""Hand-made stand-ins for unit tests of the search steps (tests/evolve/search): small
programs, fitted outcomes with stored-metric dicts, a run's books on a fake evaluator, an
executor that returns scripted results, and a corpus refresh that simulates nothing.

Why fakes: the steps (parents, children, refresh, seeding, state, books) decide from
fitted outcomes; what fitting and simulating cost is tested elsewhere. With these, a step's
rule runs on inputs a reader can check by eye, in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from evaluator.api import N_FEATURES
from evolve.assess.heldout import split_loss
from evolve.config.schema import Config
from evolve.program.language import Program, parse_program
from evolve.search.books import Books
from evolve.search.context import RunContext, Scored

CONSTS = 'CONSTANTS = {"a": (2.0, 0.1, 10.0), "b": (3.0, 0.1, 10.0)}\n'
TRAIN, VALIDATE = "run_train", "run_validate"


def program(expr: str, consts: str = CONSTS, doc: str = "") -> Program:
    """A program whose step time is ``expr`` (constants ``a`` and ``b``)."""
    head = f'"""{doc}"""\n' if doc else ""
    return parse_program(head + consts + "def step_time(f, c):\n    return " + expr + "\n")


# Distinct programs of growing complexity (ids differ, predictions differ).
EXPRS = ("c.a + c.b",
         "c.a * f.prefill_tokens + c.b",
         "c.a * f.decode_tokens + c.b",
         "c.a * (f.prefill_tokens + f.decode_tokens) + c.b",
         "c.a * f.prefill_tokens + c.b * f.decode_tokens + c.a * c.b")


def metrics(train_ape: float, val_ape: float | None = None) -> dict[str, dict[str, Any]]:
    """Stored-metric dicts of one training run (and one validate run) with the given APE."""
    def entry(split: str, ape: float) -> dict[str, Any]:
        return {"split": split, "valid": True,
                "ape": {"e2e_mean": ape, "ttft_mean": ape, "itl_mean": ape},
                "pred": {"e2e_mean": 1.0 + ape, "ttft_mean": 0.1, "itl_mean": 0.01},
                "meas": {"e2e_mean": 1.0, "ttft_mean": 0.1, "itl_mean": 0.01}}
    out = {TRAIN: entry("train", train_ape)}
    if val_ape is not None:
        out[VALIDATE] = entry("validate", val_ape)
    return out


def scored(loss: float, reason: str = "", val: float | None = None,
           groups: dict[str, dict[str, float]] | None = None, n_evals: int = 5) -> Scored:
    """A fit's outcome (``reason`` non-empty: rejected); ``val_loss`` as selection reads it
    back from the stored metrics, so a resumed run sees the same number."""
    m = metrics(loss, val)
    return Scored(groups if groups is not None else {"global": {"a": 2.5, "b": 1.5}}, m,
                  loss, n_evals, reason, split_loss(m, "validate"))


def evaluator(version: str = "v0") -> Any:
    """What the steps read of an evaluator: the corpus version and the corpora dicts."""
    return SimpleNamespace(corpus_version=version, corpora={"r": "corpus0"},
                           fit_sets={"r": "fit0"})


def config(**search: Any) -> Config:
    cfg = Config()
    cfg.run.seed = 7
    for k, v in search.items():
        setattr(cfg.search, k, v)
    return cfg


def books(cfg: Config | None = None, version: str = "v0", run_id: int = 1) -> Books:
    return Books(cfg or config(), run_id, evaluator(version))


def context(ev: Any) -> RunContext:
    return RunContext(ev, {TRAIN: "train", VALIDATE: "validate"}, "pooled", 10, 10)


def probe(n: int = 12, seed: int = 0) -> np.ndarray:
    """Fingerprint probe steps: positive random features."""
    return np.random.default_rng(seed).uniform(1.0, 100.0, (N_FEATURES, n))


@dataclass
class ScriptedPool:
    """An executor whose fits and applied jobs return what the test scripted.

    ``fit(program, seed)`` answers :meth:`map`; ``applied(fn, *job)`` answers :meth:`apply`.
    Every call is recorded in order.
    """

    fit: Callable[[Program, int], Scored]
    applied: Callable[..., Any] = lambda fn, *job: None
    maps: list[list[tuple[Program, int]]] = field(default_factory=list)
    applies: list[tuple[Any, list[tuple[Any, ...]]]] = field(default_factory=list)
    resets: int = 0

    def map(self, jobs: Sequence[tuple[Program, int]], on_result: Any = None) -> list[Scored]:
        self.maps.append(list(jobs))
        return [self.fit(p, s) for p, s in jobs]

    def apply(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
              on_result: Any = None) -> list[Any]:
        self.applies.append((fn, list(jobs)))
        return [self.applied(fn, *job) for job in jobs]

    def reset(self) -> None:
        self.resets += 1


@dataclass
class FakeRefresh:
    """Stands in for :func:`evolve.search.corpora.refresh`: no simulation; each call
    replaces the evaluator's corpora (so a restore is visible) and returns the next
    scripted (version, closed-loop loss), or raises it if it is an exception."""

    script: list[Any]
    calls: list[tuple[str, dict[str, dict[str, float]], str, bool]] = field(
        default_factory=list)

    def __call__(self, ctx: RunContext, prog: Program, groups: dict[str, dict[str, float]],
                 scope: str, progress: Any = None, strict: bool = False) -> tuple[str, float]:
        self.calls.append((prog.id, groups, scope, strict))
        out = self.script.pop(0)
        if isinstance(out, Exception):
            raise out
        version, closed = out
        ctx.evaluator.corpora = {"r": f"corpus-{version}"}
        ctx.evaluator.fit_sets = {"r": f"fit-{version}"}
        ctx.evaluator.corpus_version = version
        return version, closed
