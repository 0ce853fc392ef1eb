"""``evolve validate ID``: closed-loop simulation of an archived program on every run.

Prints the per-run table (measured vs simulated mean/p90/p99 E2E and TTFT, the steady
p99 E2E and p90/p99 TTFT over arrivals after the measured server's 30 s cold start, decode
interval, APE, split), the counts of normal runs whose percentiles are within 10 %, the
decode interval by admission time of the runs that queue, the program's long-context price
per model and the runs at a knee (``evaluator.sim.sensitivity``: every run is simulated
again at step times 3 % shorter and longer), and writes four PNG plots
(``ttft_cdfs.png``: per run, TTFT CDF measured vs simulated, steady and all) and
``plots.json`` (whose they are, for ``evolve report --validate-dir``). ID is an archived
program id (prefix accepted); its constants are those of its latest accepted evaluation. A
program file can be validated too, with ``--constants JSON`` ({group: {name: value}}) or at
its initial constants. ``--step-noise`` and ``--host-us-per-open`` set the simulator's
step-time noise and the what-if host cost per open request; ``--host-floor`` the what-if
floor under every step, the server's host time (docs/concepts/simulator.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evolve.cli.output import table
from evolve.errors import UserError
from evolve.workflows.targets import (
    add_simulator_flags,
    fitted_run_setting,
    load_fitted,
    output_dir,
    simulator_options,
)
from evolve.workflows.validate_program import (
    ProgramValidation,
    ValidateOptions,
    parse_host_floor,
    validate_program,
    write_plots,
)

HELP = "closed-loop validation of a program against every measured run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="archived program id (or prefix), a program file "
                        "or a seed name (e.g. transfer)")
    parser.add_argument("--archive", default="archive.db", help="archive path")
    parser.add_argument("--run", type=int, help="archive run whose constants to use")
    parser.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--split", default="all", choices=["all", "train", "validate", "test"],
                        help="which runs to simulate")
    parser.add_argument("--out", help="directory for the plots (default: runs/validate)")
    parser.add_argument("--constants", help="JSON file {group: {name: value}}, or {name: value} "
                        "for one global set, for a program file")
    parser.add_argument("--scope", choices=["global", "per_model", "pooled", "per_scenario"],
                        help="constant scope (default: inferred from the constant groups)")
    parser.add_argument("--step-noise", type=float, metavar="SIGMA",
                        help="sd of log of the simulator's seeded step-time noise (default: "
                             "as the program's run simulated, 0 for runs stored before the "
                             "setting; none for a program file, as fit and generalize)")
    parser.add_argument("--host-us-per-open", type=float, default=0.0, metavar="US",
                        help="what-if: add US µs of host time to every step per open request "
                             "(arrived, neither finished nor timed out); 7.6 is what the "
                             "Mixtral reasoning (validate) run's decode interval shows "
                             "(docs/concepts/simulator.md); default 0")
    parser.add_argument("--host-floor", metavar="FLOOR",
                        help="what-if: every step lasts at least the server's host time. "
                             "FLOOR 'measured': each run's median sampled schedule call "
                             "(DATA/steps/predictions.csv; a run without sampled steps gets "
                             "none); a number: that many µs for every run; default none")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    if args.no_plots and args.out is not None:
        raise UserError("--out holds only the plots, and --no-plots skips them: give one")
    args.out = args.out or "runs/validate"
    if not args.no_plots:  # an unwritable --out is found now, not after the simulations
        output_dir(args.out, "--out")
    for flag, value in (("--step-noise", args.step_noise),
                        ("--host-us-per-open", args.host_us_per_open)):
        if value is not None and not (value >= 0 and value < float("inf")):
            raise UserError(f"{flag}: must be a finite number >= 0 (got {value:g})")
    parse_host_floor(args.host_floor)
    program, groups, label, fitted_loop = load_fitted(args)
    noise = args.step_noise
    if noise is None:  # as the pick's run simulated (0 for runs stored before the key);
        stored = fitted_run_setting(args, "run", "step_noise", 0.0)  # a file: none, as fit
        noise = 0.0 if stored is None else float(stored)  # and generalize simulate
    opts = ValidateOptions(args.split, args.scope, args.constants, args.data,
                           dict(simulator_options(args, fitted_loop)), noise,
                           args.host_us_per_open, args.host_floor)
    done = validate_program(program, groups, label, opts,
                            lambda msg: print(msg, file=sys.stderr))
    if args.json:
        json.dump(done.as_dict(), sys.stdout, indent=1, sort_keys=True)
        print()
    else:
        _render(done)
    if not args.no_plots:
        for p in write_plots(done, Path(args.out)):
            print(f"wrote {p}", file=sys.stderr)
    return 0


def _render(done: ProgramValidation) -> None:
    from evolve.workflows.validation import (
        context_lines,
        drift_lines,
        envelope_lines,
        sensitivity_lines,
        summary_lines,
        table_headers,
        table_rows,
    )

    val = done.validation
    print(f"program {done.program.id[:12]} (complexity {done.program.complexity}, scope "
          f"{done.scope}); closed loop; times in s; decode interval = (E2E - TTFT) / "
          "(output tokens - 1)")
    if done.loop == "blis":
        print("engine loop: BLIS's at the pinned commit (what the exported model gives "
              "inside BLIS; TTFT includes output_token_us, as BLIS's does)")
    if done.step_noise or done.host_us_per_open:
        print(f"step-time noise sd(log) {done.step_noise:g}; what-if host time "
              f"{done.host_us_per_open:g} us per open request per step")
    floors = {n: v for n, v in done.host_floor_us.items() if v > 0}
    if floors:
        print(f"what-if host floor on {len(floors)} of {len(done.host_floor_us)} runs: every "
              f"step lasts at least {min(floors.values()) / 1e3:.2f}-"
              f"{max(floors.values()) / 1e3:.2f} ms (per run; --json lists them)")
    heads = table_headers()
    print(table(heads, table_rows(val.metrics), right=range(2, len(heads) - 1)))
    for line in [*summary_lines(val.metrics), *drift_lines(val), *context_lines(val),
                 *sensitivity_lines(val), *envelope_lines(val)]:
        print(line)
