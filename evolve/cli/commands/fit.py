"""``evolve fit SEED_OR_FILE``: fit a program's constants and show how it does on every run.

The work (simulate at the initial constants, fit on the train runs, optionally polish
closed loop, score every run) is :func:`evolve.workflows.fit.fit`; this module parses the
flags and prints the constants and the per-run table, train / validate / test apart.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from evolve.cli.output import num, pct, table
from evolve.errors import UserError
from evolve.workflows.fit import SPLIT_ORDER, FitOptions, fit, load_program
from evolve.workflows.targets import (
    SEEDS_DIR,
    add_simulator_flags,
    available_seeds,
    check_flags,
    not_blank,
    output_file,
    seed_arg,
    simulator_options,
    write_file,
)

__all__ = ["SEEDS_DIR", "available_seeds", "load_program"]  # the seeds' tests read them here

HELP = "fit a program's constants and print its per-run table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from evolve.fitting import DEFAULT_MAX_EVALS, DEFAULT_RESTARTS, SCOPES

    parser.add_argument("program", metavar="SEED_OR_FILE",
                        help=f"a seed name ({', '.join(available_seeds())}) or a program file")
    parser.add_argument("--scope", choices=SCOPES, default="global",
                        help="which runs share one constant vector (default: global)")
    parser.add_argument("--seed", type=seed_arg, default=7, help="fitting seed (default: 7)")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS, metavar="N",
                        help=f"loss evaluations per constant group (default: {DEFAULT_MAX_EVALS})")
    parser.add_argument("--restarts", type=int, default=DEFAULT_RESTARTS, metavar="N",
                        help=f"CMA-ES restarts on failure (default: {DEFAULT_RESTARTS})")
    parser.add_argument("--head-seconds", type=float, metavar="S",
                        help="cut every measured run to its first S seconds (quick demos)")
    parser.add_argument("--closed-loop", action="store_true",
                        help="score the table by closed-loop simulation at the fitted constants")
    parser.add_argument("--polish-evals", type=int, default=0, metavar="N",
                        help="then refine the constants closed loop, N simulations of the "
                             "training runs' stage slices per group (default: 0, off)")
    parser.add_argument("--prior", type=float, default=0.0, metavar="S",
                        help="pull the constants towards the program's declared initial "
                        "values with strength S / (training runs) (default: 0, off)")
    parser.add_argument("--save-constants", metavar="FILE",
                        help="write the fitted constants as JSON {group: {name: value}}, "
                        "the form `evolve export-go PROGRAM --constants FILE` and `evolve "
                        "validate PROGRAM --constants FILE` read")
    parser.add_argument("--no-physics", action="store_true",
                        help="fit without the search's physics penalty (evolve/assess/physics.py: "
                        "synthetic batches priced positive, monotone, above the memory "
                        "floor and the measured attention kernels' context slope)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def say(msg: str) -> None:
    """Progress goes to stderr so that ``--json`` output stays clean."""
    print(msg, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    check_flags(args, at_least={"max_evals": 1, "restarts": 0, "polish_evals": 0},
                nonnegative=("prior",))  # before the runs are simulated, not after
    if args.head_seconds is not None and not 0 < args.head_seconds < math.inf:
        raise UserError(f"--head-seconds {args.head_seconds}: out of range, must be a finite "
                        "number > 0")
    not_blank(args.save_constants, "--save-constants", "the JSON file to write")
    if args.save_constants:  # an unwritable path is found now, not after the fit
        output_file(args.save_constants, "--save-constants")
    program, path = load_program(args.program)
    opts = FitOptions(args.scope, args.seed, args.data, dict(simulator_options(args)),
                      args.max_evals, args.restarts, args.head_seconds, args.closed_loop,
                      args.polish_evals, args.prior, not args.no_physics)
    out = fit(program, path, opts, say)
    res = out.res
    if args.save_constants:
        write_file(args.save_constants,
                   json.dumps(res.groups, indent=1, sort_keys=True) + "\n", "--save-constants")
        say(f"wrote {args.save_constants} ({args.scope}: {', '.join(sorted(res.groups))})")
    if args.json:
        json.dump(out.as_dict(args.scope, args.seed), sys.stdout, indent=1, sort_keys=True,
                  default=float)
        print()
        return 0
    _print_constants(program, res)
    print(f"\ntraining loss (fitting windows, teacher forced): {num(res.init_loss, 4)} at "
          f"the initial constants -> {num(res.loss, 4)} fitted ({res.status})")
    if out.physics_note:
        print(out.physics_note)
    print(f"\nper run: {out.scoring}; times in s; APE of the mean")
    headers = ["run", "split", "E2E meas", "E2E pred", "E2E APE", "TTFT meas", "TTFT pred",
               "TTFT APE", "note"]
    for split in SPLIT_ORDER:
        names = [n for n in out.names if out.splits[n] == split]
        if not names:
            continue
        rows = []
        for n in names:
            m = out.metrics[n]
            row = [n + ("" if out.fitted[n] else " *"), split]
            for k in ("e2e_mean", "ttft_mean"):
                row += [num(m.meas.get(k), 3), num(m.pred.get(k), 3), pct(m.ape.get(k))]
            row.append("" if m.valid else m.reason)
            rows.append(row)
        print(f"\n[{split}] loss {num(out.split_loss[split], 4)}")
        print(table(headers, rows, right=range(1, len(headers)), strip=False))
    if not all(out.fitted.values()):
        print("\n* no fitted constants for this run's group under this scope: initial values")
    return 0


def _print_constants(program, res) -> None:
    groups = sorted(res.groups)
    headers = ["constant", "init", "low", "high", *groups]
    inert = res.inert
    rows = [[s.name, f"{s.init:.6g}", f"{s.low:.6g}", f"{s.high:.6g}",
             *(f"{res.groups[g][s.name]:.6g}" + ("=" if s.name in inert.get(g, ()) else "")
               for g in groups)] for s in program.constants]
    print(f"fitted constants ({len(groups)} group(s))")
    print(table(headers, rows, right=range(1, len(headers)), strip=False) if rows
          else "(the program declares no constants)")
    if any(inert.values()):
        print("= kept at its start: no step time of the group's runs depends on it "
              "(evolve/fitting/inert.py)")
