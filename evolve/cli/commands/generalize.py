"""``evolve generalize PROGRAM --mode lomo|lowo``: hold out a model or a workload.

For every fold, the program's constants are fitted on the runs that remain (teacher forced,
then polished closed loop on stage slices) and the held-out runs are simulated closed loop,
and again at step times 3 % shorter and longer: a miss on a run at its knee (mean E2E
moving several times the step-time change) is a small step-time error. A refitted fold
also simulates the runs it was fitted on (``fitted``): a held-out miss of a fold that
misses its own runs is partly a fitting failure, not only a generalisation one.
Leave-one-model-out asks what the program predicts for a model nobody measured. By default
(``--unseen layered``, docs/selection.md's rule) the `layered` seed is fitted globally
without the held-out model, simulates the held-out model's normal workloads, and the
program's constants for that model are calibrated to it (:mod:`evolve.fitting.calibrate`);
the program's own fit is not needed. ``--unseen global`` gives the held-out model the
program's global set fitted without it (a pooled program's global set that the models'
sets shrink to): the per-model constants of a searched program do not transfer that way.
Leave-one-workload-out keeps the program's usual per-model sets. Reasoning runs are never
fitted on (they are overloaded: teacher forcing cannot price their queues), but are
reported when held out.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from evolve.assess.heldout import normal_within
from evolve.cli.output import table
from evolve.config.schema import FitSection
from evolve.errors import UserError
from evolve.fitting.refit import refit_fold
from evolve.program.codegen import step_model
from evolve.text.words import run_label
from evolve.workflows.targets import (
    RULE,
    add_simulator_flags,
    check_flags,
    check_groups,
    infer_scope,
    load_fitted,
    note_roofline_kernels,
    on_all_cores,
    rule_program,
    seed_arg,
    simulator_options,
)

if TYPE_CHECKING:
    from evaluator.api import ConstMap, Evaluator
    from evolve.program.language import Program


HELP = "leave-one-model-out / leave-one-workload-out: fit on the rest, validate held out"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="archived program id (or prefix), a program file "
                        "or a seed name (e.g. transfer)")
    parser.add_argument("--mode", choices=["lomo", "lowo"], required=True)
    parser.add_argument("--archive", default="archive.db", help="archive path")
    parser.add_argument("--run", type=int, help="archive run whose constants to start from")
    parser.add_argument("--constants", help="JSON file {group: {name: value}}, or {name: value} "
                        "for one global set, for a program file")
    parser.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--seed", type=seed_arg, default=7, help="fitting seed")
    parser.add_argument("--max-evals", type=int, default=3000,
                        help="teacher-forced evaluations per fold (default: %(default)s; at "
                        "600 CMA-ES stopped short on 10-constant programs, and the same fold "
                        "refitted with another --seed moved the held-out figures by 10 points)")
    parser.add_argument("--polish-evals", type=int,
                        help="closed-loop simulations per constant group of a refitted fold "
                        f"(0 = no polish; default: {FitSection.polish_evals}, "
                        "fit.polish_evals, the budget the search polishes its pick with)")
    parser.add_argument("--scope", choices=["global", "per_model", "pooled"],
                        help="constant scope of the refit (--mode lowo, or lomo with "
                        "--unseen global; default: pooled for a program "
                        "fitted pooled, else global for lomo and per_model for lowo; pooled "
                        "fits per model shrunk to a global set, and a held-out model gets "
                        "the global set)")
    parser.add_argument("--prior", type=float, default=FitSection.prior_strength,
                        metavar="S", help="pull constants towards the program's declared "
                        "values with strength S / (training runs); as fit.prior_strength "
                        "(default: %(default)s)")
    parser.add_argument("--pool", type=float, default=FitSection.pool_strength,
                        metavar="S", help="pooled scope: pull each model's constants "
                        "towards the global set with strength S / (its training runs); as "
                        "fit.pool_strength (default: %(default)s)")
    parser.add_argument("--unseen", choices=["layered", "global"],
                        help="--mode lomo: the held-out model's constants, calibrated to the "
                        "`layered` rule fitted without it (default) or the program's own "
                        "global set fitted without it (docs/selection.md)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    floors = {"max_evals": 1} | ({} if args.polish_evals is None else {"polish_evals": 0})
    check_flags(args, at_least=floors, nonnegative=("prior", "pool"))
    from evaluator.api import Evaluator, e2e_response
    from evolve.fitting import const_map

    if args.unseen and args.mode != "lomo":
        raise UserError("--unseen: applies to --mode lomo (a held-out model); "
                        "--mode lowo holds out workloads of measured models")
    program, groups, label, fitted_loop = load_fitted(args)
    unseen = "global" if args.mode != "lomo" or label == RULE else (args.unseen or RULE)
    for flag, given in (("--scope", args.scope), ("--polish-evals", args.polish_evals)):
        if unseen == RULE and given is not None:  # carry_to neither scopes nor polishes
            raise UserError(f"{flag} {given}: not used when the held-out model is "
                            f"calibrated to `{RULE}` (--unseen {RULE}, the default of --mode "
                            "lomo); pass --unseen global to refit the program's folds")
    if args.polish_evals is None:
        args.polish_evals = FitSection.polish_evals
    if args.mode == "lomo" and args.scope == "per_model":  # its runs all held out
        raise UserError("--scope per_model: --mode lomo holds out a whole model, so it gets "
                        "no fitted set of its own (its runs would be simulated at the "
                        "declared values); pass --scope global or pooled")
    ev = on_all_cores(Evaluator.from_data(args.data, **simulator_options(args, fitted_loop)))
    note_roofline_kernels(program, ev.scenarios)
    if args.constants:
        check_groups(groups, ev.scenarios, f"--constants {args.constants}")
    pooled = infer_scope(groups, ev.scenarios) == "pooled" if groups else False
    scope = args.scope or ("pooled" if pooled else "global" if args.mode == "lomo"
                           else "per_model")
    key = (lambda s: s.model) if args.mode == "lomo" else (lambda s: s.workload)
    normal_names = {s.name for s in ev.scenarios if s.workload != "reasoning"}
    folds = sorted({key(s) for s in ev.scenarios if s.name in normal_names})
    if len(folds) < 2:
        what = "models" if args.mode == "lomo" else "workloads"
        raise UserError(f"--mode {args.mode}: needs normal (non-reasoning) runs of at least "
                        f"two {what} to hold one out; the data has {len(folds)}")
    model = step_model(program)
    start_groups = groups if scope != "global" or set(groups) == {"global"} else {}
    out: dict[str, dict] = {}
    fold_consts: dict[str, dict] = {}
    knees: dict[str, dict] = {}  # held-out run -> mean E2E change at step times -/+3 %
    fits: dict[str, dict] = {}  # fold -> its fitted runs' APEs (a refitted fold only)
    for held in folds:
        train = [s.name for s in ev.scenarios if key(s) != held and s.workload != "reasoning"]
        test = [s.name for s in ev.scenarios if key(s) == held]
        print(f"fold {held}: fit on {len(train)} runs, validate on {len(test)}",
              file=sys.stderr)
        if unseen == RULE:
            fold_consts[held], consts = carry_to(program, ev, train, test, normal_names,
                                                 args)
        else:
            fitted = refit_fold(program, ev, train, scope, start_groups, args.seed,
                                args.max_evals, args.polish_evals, args.prior, args.pool)
            fold_consts[held] = fitted
            consts = const_map(program, fitted, ev.scenarios, scope)
            fits[held] = _fitted_apes(ev.simulate(model, consts, names=train))
        sims = ev.simulate(model, consts, names=test)
        out[held] = {n: r.metrics.to_dict() for n, r in sims.items()}
        knees[held] = e2e_response(ev.simulate, model, consts, sims)
    hits, n_normal = normal_within(out, normal_names)
    if args.json:
        json.dump({"program": program.id, "mode": args.mode, "seed": args.seed,
                   "scope": scope, "max_evals": args.max_evals,
                   "polish_evals": args.polish_evals, "folds": out, "sensitivity": knees,
                   "unseen": unseen,
                   "constants": fold_consts, "fitted": fits,
                   "normal_within_10pct": {"runs": hits, "of": n_normal}}, sys.stdout,
                  indent=1, sort_keys=True)
        print()
        return 0
    rows = []
    for held, runs in out.items():
        for name, m in runs.items():
            short = run_label(name)
            rows.append([held, short, f"{100 * m['ape'].get('e2e_mean', float('inf')):.1f}%",
                         f"{100 * m['ape'].get('ttft_mean', float('inf')):.1f}%",
                         f"{100 * m['ape'].get('itl_mean', float('inf')):.1f}%",
                         f"{m['pred'].get('failures', 0):.0f}/{m['meas'].get('failures', 0):.0f}",
                         _knee(knees[held].get(name)), m["reason"]])
    how = (f"held-out model calibrated to `{RULE}`" if unseen == RULE else f"scope {scope}")
    print(f"{args.mode} for {label} ({how}); held-out runs, closed loop")
    print(table(["held out", "run", "E2E APE", "TTFT APE", "decode APE", "failed sim/meas",
                 "E2E at step -/+3 %", "note"], rows, right=(2, 3, 4, 5, 6)))
    for held, apes in fits.items():
        worst = max(apes, key=lambda n: apes[n]["e2e_mean"])
        print(f"fold {held}: its {len(apes)} fitted runs closed loop, worst mean E2E "
              f"{100 * apes[worst]['e2e_mean']:.1f} % ({run_label(worst)})"
              + ("; the fold misses a run it was fitted on, so its held-out misses are "
                 "partly a fitting failure" if apes[worst]["e2e_mean"] > 0.10 else ""))
    print(f"held-out normal runs within 10 % mean E2E: {hits} of {n_normal}"
          + ("" if args.mode == "lowo" or label == RULE or unseen == RULE else
             " (for a model nobody measured docs/selection.md calibrates a program to the "
             "`layered` rule: --unseen layered)"))
    return 0


def carry_to(program: Program, ev: Evaluator, train: list[str], test: list[str],
             normal: set[str], args: argparse.Namespace) -> tuple[dict, ConstMap]:
    """The held-out model's constants by docs/selection.md's rule
    (:func:`evolve.fitting.calibrate.carry`: `layered` fitted on ``train``, the program
    calibrated to it on the held-out normal runs' workloads). Returns what the JSON
    stores and the constants of the held-out runs."""
    from evolve.fitting import const_map
    from evolve.fitting.calibrate import carry

    record = carry(program, rule_program(), ev, train, [n for n in test if n in normal],
                   seed=args.seed, max_evals=args.max_evals, prior=args.prior,
                   pool=args.pool)
    return record, const_map(program, {"global": record["calibrated"]},
                             [ev.by_name[n] for n in test], "global")


def _fitted_apes(sims: dict) -> dict[str, dict[str, float]]:
    """Each fitted run's mean E2E / TTFT / decode APE, closed loop, at the fold's
    constants: whether the fold fits its own runs, which tells a fitting failure from a
    generalisation one (docs/selection.md, "How `evolve generalize` fits a fold")."""
    keys = ("e2e_mean", "ttft_mean", "itl_mean")
    return {n: {k: float(r.metrics.ape.get(k, float("inf"))) for k in keys}
            for n, r in sorted(sims.items())}


def _knee(v: dict[str, float] | None) -> str:
    """How far the run's simulated mean E2E moves with step times 3 % shorter / longer:
    a held-out miss at a knee (several times the step-time change) is a small step-time
    error (evaluator/sim/sensitivity.py)."""
    return "-" if v is None else f"{100 * v['minus']:+.1f} / {100 * v['plus']:+.1f}"
