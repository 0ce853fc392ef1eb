"""Selection: which archived programs an operator sees as parents and inspirations.

Why here and not in the operator: selection must see training loss only (validate/test
metrics are stored, never read by selection), and must draw from the run's seeded stream
so a resumed run selects what an uninterrupted one would. Operators receive
:class:`~evolve.operators.base.Parent` views holding training errors only.
"""

from __future__ import annotations

from typing import Any

from evolve.config.schema import Config
from evolve.operators.base import Parent
from evolve.search.books import Books
from evolve.search.pareto import select_parents
from evolve.search.rng import PURPOSE_SELECT, generation_rng
from evolve.search.transfer import SPLIT as TRANSFER


def worst_table(train: dict[str, Any], rows: int = 6) -> str:
    """Where a program errs most: the training runs / load-stage slices with the largest
    mean-E2E error, measured vs simulated (mean E2E, TTFT, per-token decode interval)."""
    ranked = sorted(train.items(), key=lambda kv: -float(kv[1]["ape"].get("e2e_mean", 0.0)))
    lines = ["| run (load stage slice) | E2E sim / meas (s) | TTFT sim / meas (ms) | "
             "decode interval sim / meas (ms) |", "|---|---|---|---|"]
    for name, m in ranked[:rows]:
        p, me = m["pred"], m["meas"]
        if not {"e2e_mean", "ttft_mean", "itl_mean"} <= set(p) & set(me):
            continue
        lines.append(f"| {name} | {p['e2e_mean']:.3f} / {me['e2e_mean']:.3f} | "
                     f"{1e3 * p['ttft_mean']:.1f} / {1e3 * me['ttft_mean']:.1f} | "
                     f"{1e3 * p['itl_mean']:.2f} / {1e3 * me['itl_mean']:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def parent_view(books: Books, pid: str) -> Parent:
    """An accepted program as an operator sees it: training errors only (with the search
    pricing transfer, also its ``<run>~lomo`` rows: training runs priced by constants
    fitted without their model, :mod:`evolve.search.transfer`)."""
    info = books.state.info[pid]
    shown = {n: m for n, m in sorted(info.metrics.items())
             if m.get("split") in ("train", TRANSFER)}
    train = {n: m for n, m in shown.items() if m["split"] == "train"}
    errors: dict[str, dict[str, float]] = {}
    for n, m in shown.items():
        e = dict(m["ape"])
        for k in ("e2e_mean", "ttft_mean", "itl_mean"):
            if k in m["pred"] and k in m["meas"]:
                e[f"pred_{k}"], e[f"meas_{k}"] = m["pred"][k], m["meas"][k]
        errors[n] = e
    return Parent(program=info.program, constants=info.groups, loss=info.loss,
                  train_errors=errors, worst_batches=worst_table(train),
                  rejections=tuple(books.state.rejections.get(pid, ())))


def choose(books: Books, cfg: Config, g: int) -> tuple[list[Parent], list[Parent]]:
    """Parents (NSGA-II tournaments over the grid's elites) and inspirations (the best of
    the frontier) for generation ``g``.

    Operators derive child i from ``parents[i % children]`` and may cross it with the
    others: the first ``children`` parents are the children's primaries, all are
    tournament winners.
    """
    elites = books.state.grid.elites()
    sel = generation_rng(cfg.run.seed, g, PURPOSE_SELECT)
    k = cfg.search.children * cfg.search.parents_per_child
    parents = [parent_view(books, e.program_id) for e in select_parents(elites, sel, k)]
    front = sorted(books.frontier().members, key=lambda e: (e.loss, e.program_id))
    insp = [parent_view(books, e.program_id) for e in front[: cfg.search.inspirations]]
    return parents, insp
