"""``evolve export-trace EXPERIMENT --out PREFIX``: the TraceV2 pair for ``blis replay``.

Why: to run an exported program in BLIS on the same requests evolve's simulator saw, BLIS
must be given what evolve's loader inferred, not only what was measured: the shared-prefix
groups, the filled and clamped input lengths, the simulated output lengths, every request
(failed ones too) and the client deadline. ``evaluator/ingest/to_tracev2.py`` says why each
matters. The command writes ``PREFIX.yaml`` and ``PREFIX.csv`` and prints the ``blis
replay`` command with every flag the run needs (docs/blis.md, "Replaying a run").
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HELP = "write an experiment as a BLIS TraceV2 pair (and print the blis replay command)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", metavar="EXPERIMENT",
                        help="experiment name (or a unique part of it)")
    parser.add_argument("--out", required=True, metavar="PREFIX",
                        help="write PREFIX.yaml and PREFIX.csv")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    parser.add_argument("--from", dest="start", type=float, metavar="S",
                        help="only requests arriving from S seconds on (times restart at 0)")
    parser.add_argument("--to", dest="end", type=float, metavar="S",
                        help="only requests arriving before S seconds")
    parser.add_argument("--blis", default="./blis", metavar="PATH",
                        help="blis binary, for the printed command (default: ./blis)")
    parser.add_argument("--blis-dir", default=".", metavar="DIR",
                        help="where BLIS's hardware_config.json and defaults.yaml are, for "
                             "the printed command (default: .)")
    parser.add_argument("--latency-model", default="evolved", metavar="NAME",
                        help="BLIS backend name, for the printed command (default: evolved)")


def resolve(name: str, names: list[str]) -> str:
    """The experiment ``name`` names: exact, else the only one containing it."""
    from evolve.errors import UserError
    from evolve.workflows.targets import not_blank

    if name in names:
        return name
    not_blank(name, "EXPERIMENT", "an experiment (see `evolve data`)")  # not "ambiguous"
    hits = [n for n in names if name in n]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise UserError(f"{name}: no such experiment (see `evolve data`)")
    raise UserError(f"{name}: ambiguous, matches {', '.join(hits[:4])}")


def run(args: argparse.Namespace) -> int:
    from evaluator.api import (
        data_dir,
        experiment_dirs,
        load_scenarios,
        replay_command,
        scenario_trace,
        shell,
        write_tracev2,
    )
    from evolve.errors import UserError
    from evolve.workflows.targets import output_dir, output_file

    prefix = Path(args.out)
    if args.out.endswith(("/", "\\")) or prefix.is_dir():
        raise UserError(f"--out {args.out}: a file prefix is needed (PREFIX.yaml and "
                        "PREFIX.csv are written), not a directory")
    if prefix.parent != Path() and not prefix.parent.exists():
        output_dir(prefix.parent, "--out")  # as report and validate create theirs
    for ext in (".yaml", ".csv"):  # both files of the pair, before any work
        output_file(f"{args.out}{ext}", "--out")
    root = data_dir(args.data)
    name = resolve(args.experiment, [p.name for p in experiment_dirs(root)])
    (sc,) = load_scenarios(root, [name])
    if args.start is not None or args.end is not None:
        start = args.start or 0.0
        end = args.end if args.end is not None else sc.arrival_us[-1] / 1e6 + 1.0
        if not (math.isfinite(start) and math.isfinite(end)) or start < 0:
            raise UserError(f"--from/--to: finite seconds from 0 on, got {start:g} .. {end:g}")
        if not start < end:
            last = sc.arrival_us[-1] / 1e6
            raise UserError(f"--from {start:g}" + (f" --to {end:g}" if args.end is not None else
                            f": the last request of {name} arrives at {last:.1f} s")
                            + ": need 0 <= from < to")
        keep = (sc.arrival_us >= start * 1e6) & (sc.arrival_us < end * 1e6)
        status = sc.meta.get("status")
        sc = sc.window(start, end)
        if status is not None:  # window() keeps per-run meta whole: cut the statuses too
            sc.meta["status"] = [s for s, k in zip(status, keep.tolist(), strict=True) if k]
        if sc.n_requests == 0:
            raise UserError(f"--from/--to: no request of {name} arrives in [{start:g}, {end:g}) s")
    header, columns = scenario_trace(sc)
    hpath, dpath = write_tracev2(header, columns, args.out)
    failed = int(sc.measured.failed.sum())
    print(f"wrote {hpath} and {dpath}: {sc.n_requests} requests ({failed} failed) of {sc.name}",
          file=sys.stderr)
    argv = replay_command(sc, args.out, blis=args.blis, blis_dir=args.blis_dir,
                          latency_model=args.latency_model)
    # a trace has no field for evolve's names: say how to get this experiment back by them
    # (the model's constants are keyed by its short name)
    back = ["evolve", "ingest", str(hpath), "--name", sc.name, "--model-short", sc.model,
            "--split", sc.split, "--model", "CONFIG.json"]
    print(f"ingest it back as this experiment: {shell(back)} ...", file=sys.stderr)
    print("replay it in BLIS (built with the exported model, docs/blis.md):", file=sys.stderr)
    print(shell(argv))
    return 0
