"""``evolve frontier``: the loss-vs-complexity frontier of a run, with the pick marked.

Lists the hall of fame (the best program of every complexity); ``F`` marks the members of
the frontier (the non-dominated ones). Each shows its training loss (what the frontier is
built on) and its validate loss (what the pick reads among the eligible hall of fame, see
``evolve.search.pareto``); test errors are shown for reference and never read by any
decision. A run that prices transfer (``fit.transfer_weight > 0``) also shows the search
loss the frontier is then built on and the transfer loss (:mod:`evolve.search.transfer`).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

HELP = "show the Pareto frontier of a run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", type=int, metavar="ID", help="run id (default: the latest)")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--generation", type=int, metavar="G",
                        help="frontier after generation G (default: the last)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from evolve.archive import Archive
    from evolve.archive.models import on_frontier
    from evolve.assess.heldout import fitting_loss
    from evolve.cli.output import (
        num,
        pct,
        print_json,
        short,
        split_errors,
        split_modes,
        table,
    )
    from evolve.errors import ArchiveError
    from evolve.search.pareto import Frontier
    from evolve.search.selection import split_loss
    from evolve.text.untrusted import printable
    from evolve.text.words import MODE_WORDS

    with Archive(args.archive, create=False) as archive:
        rid = args.run if args.run is not None else archive.latest_run_id()
        run_row = archive.run(rid)
        rows = archive.frontier(rid, args.generation)
        if not rows:
            raise ArchiveError(f"{archive.path}: run {rid} has no frontier"
                               + (f" at generation {args.generation}"
                                  if args.generation is not None else " yet"))
        latest = archive.latest_accepted(rid)
    search_cfg = run_row.config.get("search", {})
    tol = float(search_cfg.get("pick_tolerance", 1.5))
    # runs recorded before the validate rule existed were picked by PySR's rule
    rule = Frontier.from_elites([], tol, str(search_cfg.get("pick_rule", "pysr"))).rule
    members: list[dict[str, Any]] = []
    stored = []
    for r, front in zip(rows, on_frontier(rows), strict=True):
        ev = latest.get(r.program_id)
        errs = split_errors(ev.metrics if ev else None)
        metrics = ev.metrics if ev else None
        stored.append(metrics)
        transfer = fitting_loss(metrics, "transfer")  # nan unless the run prices transfer
        members.append({"id": r.program_id, "complexity": r.complexity, "loss": r.loss,
                        "train_loss": r.loss if math.isnan(transfer)
                        else fitting_loss(metrics, "train"), "transfer_loss": transfer,
                        "validate_loss": split_loss(metrics, "validate"),
                        "picked": bool(r.picked), "on_frontier": front, "errors": errs,
                        "constants": ev.constants if ev else None})
    modes = split_modes(stored)
    if args.json:
        print_json({"run": rid, "generation": rows[0].generation, "pick_rule": rule,
                    "members": members, "modes": modes})
        return 0
    priced = any(not math.isnan(m["transfer_loss"]) for m in members)
    headers = ["", "id", "cx", *(["loss", "transfer"] if priced else []), "train loss",
               "val loss", "train E2E", "train TTFT", "val E2E", "val TTFT", "test E2E",
               "test TTFT"]
    body = []
    for m in members:
        e = m["errors"]
        mark = ("*" if m["picked"] else "") + ("F" if m["on_frontier"] else "")
        body.append([mark, short(m["id"]), m["complexity"],
                     *([num(m["loss"]), num(m["transfer_loss"])] if priced else []),
                     num(m["train_loss"]), num(m["validate_loss"]), pct(e["train"]["e2e_mean"]),
                     pct(e["train"]["ttft_mean"]), pct(e["validate"]["e2e_mean"]),
                     pct(e["validate"]["ttft_mean"]), pct(e["test"]["e2e_mean"]),
                     pct(e["test"]["ttft_mean"])])
    n_front = sum(m["on_frontier"] for m in members)
    print(f"run {rid}, generation {rows[0].generation}: the best program of each of "
          f"{len(rows)} complexities, {n_front} on the frontier (F) (mean APE per split)")
    print(table(headers, body, right=range(2, len(headers))))
    if modes:  # archives record how each run was scored; say it
        print(printable("figures: " + "; ".join(  # modes are read from the archive
            f"{split} " + ", ".join(MODE_WORDS.get(m, m) for m in ms)
            for split, ms in modes.items())))
    if "teacher_forced" in modes.get("test", []) + modes.get("validate", []):
        print("  (teacher forced: the program's step times on the batches and queue of the "
              "run's corpora, so an overloaded run's queue is not the program's; "
              "`evolve validate ID` simulates every run closed loop)")
    if priced:
        print("loss = the search loss: sqrt(train^2 + w * max(0, transfer - margin)^2); "
              "transfer = each model's training runs priced by constants fitted without it")
    print(f"* {rule}")
    return 0
