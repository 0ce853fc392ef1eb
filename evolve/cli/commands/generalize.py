"""``evolve generalize PROGRAM --mode lomo|lowo``: hold out a model or a workload.

The work (a fold per model or workload: constants from the remaining runs, by
docs/selection.md's rule or by refitting the program, and the held-out runs simulated
closed loop) is :func:`evolve.workflows.generalize.generalize`, whose docstring says how
each fold is fitted; this module parses the flags and prints the held-out runs' table, the
refitted folds' own fit and how many normal runs land within 10 %.
"""

from __future__ import annotations

import argparse
import json
import sys

from evolve.cli.output import percent, table
from evolve.config.schema import FitSection
from evolve.text.words import run_label
from evolve.workflows.generalize import GeneralizeOptions, check_mode, generalize
from evolve.workflows.targets import (
    RULE,
    add_simulator_flags,
    check_flags,
    load_fitted,
    seed_arg,
    simulator_options,
)

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
    opts = GeneralizeOptions(args.mode, args.scope, args.seed, args.max_evals,
                             args.polish_evals, args.prior, args.pool, args.unseen, args.data,
                             constants=args.constants)
    check_mode(opts)  # before the program loads
    program, groups, label, fitted_loop = load_fitted(args)
    opts.simulator = dict(simulator_options(args, fitted_loop))
    gen = generalize(program, groups, label, opts, lambda msg: print(msg, file=sys.stderr))
    if args.json:
        json.dump(gen.as_dict(), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    inf = float("inf")
    rows = [[held, run_label(name), *(percent(m["ape"].get(k, inf)) + "%"
                                      for k in ("e2e_mean", "ttft_mean", "itl_mean")),
             f"{m['pred'].get('failures', 0):.0f}/{m['meas'].get('failures', 0):.0f}",
             _knee(gen.sensitivity[held].get(name)), m["reason"]]
            for held, runs in gen.folds.items() for name, m in runs.items()]
    rule = gen.unseen == RULE
    how = f"held-out model calibrated to `{RULE}`" if rule else f"scope {gen.scope}"
    print(f"{args.mode} for {label} ({how}); held-out runs, closed loop")
    print(table(["held out", "run", "E2E APE", "TTFT APE", "decode APE", "failed sim/meas",
                 "E2E at step -/+3 %", "note"], rows, right=(2, 3, 4, 5, 6)))
    for held, apes in gen.fitted.items():
        worst = max(apes, key=lambda n: apes[n]["e2e_mean"])
        print(f"fold {held}: its {len(apes)} fitted runs closed loop, worst mean E2E "
              f"{percent(apes[worst]['e2e_mean'])} % ({run_label(worst)})"
              + ("; the fold misses a run it was fitted on, so its held-out misses are "
                 "partly a fitting failure" if apes[worst]["e2e_mean"] > 0.10 else ""))
    print(f"held-out normal runs within 10 % mean E2E: {gen.hits} of {gen.n_normal}"
          + ("" if args.mode == "lowo" or label == RULE or rule else
             " (for a model nobody measured docs/selection.md calibrates a program to the "
             "`layered` rule: --unseen layered)"))
    return 0


def _knee(v: dict[str, float] | None) -> str:
    """How far the run's simulated mean E2E moves with step times 3 % shorter / longer:
    a held-out miss at a knee (several times the step-time change) is a small step-time
    error (evaluator/sim/sensitivity.py)."""
    return "-" if v is None else f"{percent(v['minus'], signed=True)} / " \
        f"{percent(v['plus'], signed=True)}"
