"""``evolve frontier``: the loss-vs-complexity frontier of a run, with the pick marked.

Lists the hall of fame (the best program of every complexity); ``F`` marks the members of
the frontier (the non-dominated ones). Each shows its training loss (what the frontier is
built on) and its validate loss (what the pick reads among the eligible hall of fame, see
``evolve.search.pareto``); test errors, closed loop on each whole test run, computed once
when the run ended (``evolve.search.final_scores``), are shown for reference and never read
by any decision (a run without them shows no test columns). A run that prices transfer
(``fit.transfer_weight > 0``) also shows the search loss the frontier is then built on and
the transfer loss (:mod:`evolve.search.transfer`).
"""

from __future__ import annotations

import argparse

HELP = "show the Pareto frontier of a run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", type=int, metavar="ID", help="run id (default: the latest)")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--generation", type=int, metavar="G",
                        help="frontier after generation G (default: the last)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from evolve.cli.output import num, pct, print_json, short, table
    from evolve.text.untrusted import printable
    from evolve.text.words import MODE_WORDS
    from evolve.workflows.frontier import load_frontier

    view = load_frontier(args.archive, args.run, args.generation)
    if args.json:
        print_json({"run": view.run_id, "generation": view.generation, "pick_rule": view.rule,
                    "members": [vars(m) for m in view.members], "modes": view.modes})
        return 0
    priced, tested = view.priced, view.closed_loop_test
    headers = ["", "id", "cx", *(["loss", "transfer"] if priced else []), "train loss",
               "val loss", "train E2E", "train TTFT", "val E2E", "val TTFT",
               *(["test E2E", "test TTFT"] if tested else [])]
    body = []
    for m in view.members:
        e, t = m.errors, m.test_closed_loop or {}
        mark = ("*" if m.picked else "") + ("F" if m.on_frontier else "")
        body.append([mark, short(m.id), m.complexity,
                     *([num(m.loss), num(m.transfer_loss)] if priced else []),
                     num(m.train_loss), num(m.validate_loss), pct(e["train"]["e2e_mean"]),
                     pct(e["train"]["ttft_mean"]), pct(e["validate"]["e2e_mean"]),
                     pct(e["validate"]["ttft_mean"]),
                     *([pct(t.get("e2e_mean")), pct(t.get("ttft_mean"))] if tested else [])])
    n_front = sum(m.on_frontier for m in view.members)
    print(f"run {view.run_id}, generation {view.generation}: the best program of each of "
          f"{len(view.members)} complexities, {n_front} on the frontier (F) (mean APE per "
          "split)")
    print(table(headers, body, right=range(2, len(headers))))
    modes = {s: ms for s, ms in view.modes.items() if s != "test"}
    if modes:  # archives record how each run was scored; say it
        print(printable("figures: " + "; ".join(  # modes are read from the archive
            f"{split} " + ", ".join(MODE_WORDS.get(m, m) for m in ms)
            for split, ms in modes.items())
            + ("; test closed loop on each whole run, once at the end of the run (shown, "
               "never read by selection)" if tested else "")))
    if "teacher_forced" in modes.get("validate", []):
        print("  (teacher forced: the program's step times on the batches and queue of the "
              "run's corpora, so an overloaded run's queue is not the program's; "
              "`evolve validate ID` simulates every run closed loop)")
    if "test" in view.modes and not tested:
        print("no test columns: this run has no closed-loop test figures (runs compute them "
              "when they end; its stored test figures are teacher forced); `evolve validate "
              "ID --split test` simulates them")
    if priced:
        print("loss = the search loss: sqrt(train^2 + w * max(0, transfer - margin)^2); "
              "transfer = each model's training runs priced by constants fitted without it")
    print(f"* {view.rule}")
    return 0
