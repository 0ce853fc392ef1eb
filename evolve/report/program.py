"""Page 3, one program: source, constants per model, per-run scores against measured,
parents and children, a diff against each parent, and what it displaced in the grid.

Why the grid history: "what did it beat" has a precise answer in MAP-Elites. A program
enters the search's memory only by taking a grid cell from the elite that held it; that
elite (and its loss) is what it beat. The per-run table is the closed-loop judgement the
run stored (stage slices of the training and validate runs, whole validate runs where
queues dominate, teacher-forced test runs), labelled by split, then the whole test runs
closed loop as the run's end simulated them (``closed_loop_final``) where it did; test
rows are shown, marked as held out, never as a selection criterion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evolve.report.data import EvalBrief, ProgramData, RunData
from evolve.report.highlight import DiffLine, diff_lines

SPLIT_ORDER = {"train": 0, "validate": 1, "test": 2}
# (metric key, column label) of the per-run table; decode interval = per-request
# (E2E - TTFT) / (output tokens - 1), stored as ``itl_mean``
RUN_COLUMNS = (("e2e_mean", "mean E2E"), ("ttft_mean", "mean TTFT"),
               ("itl_mean", "decode interval"), ("e2e_p99", "p99 E2E"))


@dataclass
class RunRow:
    """One measured run (or stage slice) of the per-run table."""

    name: str
    split: str
    mode: str
    cells: list[tuple[float | None, float | None, float | None]]  # (measured, pred, APE)
    failures: tuple[float | None, float | None]  # (simulated, measured)
    valid: bool
    reason: str


@dataclass
class Edge:
    """A parent or child of this program and the operator that made the child."""

    program_id: str
    operator: str
    generation: int
    train_loss: float
    complexity: int | None
    in_run: bool  # False: a parent id the run does not know (outside program)


@dataclass
class Displaced:
    """A grid cell this program took, and the elite it took it from (None: was empty)."""

    cell: str
    generation: int
    previous_id: str | None
    previous_loss: float | None


@dataclass
class ProgramPage:
    program: ProgramData
    roles: list[str]
    const_names: list[str]
    const_rows: list[tuple[str, list[float | None]]]  # group -> values in const_names order
    runs: list[RunRow]
    parents: list[Edge]
    children: list[Edge]
    diffs: list[tuple[str, list[DiffLine]]]  # parent id -> diff (parent -> this)
    history: list[EvalBrief]
    displaced: list[Displaced] = field(default_factory=list)
    llm_anchor: str | None = None  # id of its LLM exchange on the LLM page


def roles_of(pid: str, pick: str | None, champ: str | None, frontier: set[str],
             p: ProgramData) -> list[str]:
    out = []
    if pid == pick:
        out.append("pick")
    if pid == champ:
        out.append("champion")
    if pid in frontier:
        out.append("frontier")
    if p.kind == "seed":
        out.append("seed")
    if p.edited:
        out.append("edited")
    return out


def run_rows(metrics: Mapping[str, Mapping[str, Any]] | None) -> list[RunRow]:
    """The per-run table from stored metrics, by split then name."""
    rows = []
    for name, m in sorted((metrics or {}).items(),
                          key=lambda kv: (SPLIT_ORDER.get(kv[1].get("split", ""), 9), kv[0])):
        pred, meas, ape = m.get("pred") or {}, m.get("meas") or {}, m.get("ape") or {}
        cells = [(meas.get(k), pred.get(k), ape.get(k)) for k, _label in RUN_COLUMNS]
        rows.append(RunRow(name, str(m.get("split", "")), str(m.get("mode", "")), cells,
                           (pred.get("failures"), meas.get("failures")),
                           bool(m.get("valid", True)), str(m.get("reason", ""))))
    return rows


def constant_table(constants: Mapping[str, Mapping[str, float]] | None
                   ) -> tuple[list[str], list[tuple[str, list[float | None]]]]:
    """Constant names (columns) and one row per group (model, scenario or ``global``)."""
    groups = dict(constants or {})
    names = sorted({k for c in groups.values() for k in c})
    return names, [(g, [groups[g].get(n) for n in names]) for g in sorted(groups)]


def _edge(data: RunData, pid: str, operator: str | None = None) -> Edge:
    p = data.programs.get(pid)
    if p is None:
        return Edge(pid, operator or "?", -1, math.nan, None, False)
    return Edge(pid, operator or p.operator, p.generation, p.train_loss, p.complexity, True)


def displacements(data: RunData) -> dict[str, list[Displaced]]:
    """For every program, the grid cells it took and whom it took them from."""
    holder: dict[str, tuple[str, float]] = {}
    out: dict[str, list[Displaced]] = {}
    for g in sorted(data.grids):
        for c in data.grids[g]:
            prev = holder.get(c.cell)
            if prev is None or prev[0] != c.program_id:
                out.setdefault(c.program_id, []).append(Displaced(
                    c.cell, g, prev[0] if prev else None, prev[1] if prev else None))
            holder[c.cell] = (c.program_id, c.loss)
    return out


def build_program(data: RunData, pid: str, pick: str | None = None,
                  champ: str | None = None, frontier: set[str] | None = None,
                  displaced: dict[str, list[Displaced]] | None = None,
                  llm_anchor: str | None = None) -> ProgramPage:
    """The page data of one program (shared lookups may be passed in, for speed)."""
    p = data.programs[pid]
    names, rows = constant_table(p.constants)
    parents = [_edge(data, q, p.operator) for q in dict.fromkeys(p.parents)]
    children = [_edge(data, c) for c in p.children]
    diffs = [(q, diff_lines(data.programs[q].source, p.source, f"parent {q[:12]}",
                            f"program {pid[:12]}"))
             for q in dict.fromkeys(p.parents) if q in data.programs]
    if displaced is None:
        displaced = displacements(data)
    return ProgramPage(p, roles_of(pid, pick, champ, frontier or set(), p), names, rows,
                       run_rows(p.metrics) + run_rows(p.test_closed_loop), parents,
                       children, diffs, list(p.evals),
                       displaced.get(pid, []), llm_anchor)
