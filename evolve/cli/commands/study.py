"""``evolve study``: independent runs of one configuration, seeds in parallel, and the
median [min, max] closed-loop errors of each run's picked program over the seeds.

Why a command: a result is never one lucky run, so the README's table is the spread over
five seeds; run one after another that is five times the wall time of one search. The
work (each seed an ``evolve run`` process, local or on one Ray cluster, its pick validated
by ``evolve validate``; an interrupted study resumes) is
:func:`evolve.workflows.study.study`, whose docstring says what each seed writes; this
module checks the flags and prints the progress and the table. Ctrl-C or SIGTERM stops the
seeds' searches at a safe point (each prints how far it got), starts no new seed, and the
same command continues.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys

from evolve.errors import UserError
from evolve.workflows.study import METRICS, StudyOptions, study
from evolve.workflows.study import run_argv as _run_argv
from evolve.workflows.targets import check_flags, not_blank, output_dir

__all__ = ["_run_argv"]  # the tests build a seed's command line here

HELP = "independent runs (seeds in parallel) and the median [min, max] of their picks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 1, 2, 3, 4], metavar="S")
    parser.add_argument("--generations", type=int, metavar="N",
                        help="generations per seed (default: the configuration's)")
    parser.add_argument("--config", metavar="F", help="TOML configuration of every seed")
    parser.add_argument("--out", default="runs/study", metavar="DIR",
                        help="per-seed archives, logs, validations and summary.json")
    parser.add_argument("--archive", metavar="URL",
                        help="one archive for every seed (e.g. postgresql://...); "
                        "default: OUT/seed-S.db each")
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="--executor ray: join this cluster (default: start one here)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="local executor: fitting processes per seed")
    parser.add_argument("--parallel", type=int, metavar="P",
                        help="seeds at a time (default: local, cores / workers; ray, all)")
    parser.add_argument("--data", metavar="DIR", help="data directory")
    parser.add_argument("--head-seconds", type=float, metavar="S",
                        help="cut every measured run to its first S seconds (quick demos)")


def run(args: argparse.Namespace) -> int:
    if len(set(args.seeds)) != len(args.seeds):
        raise UserError("--seeds: each seed once")
    from evolve.config.schema import SEED_LIMIT

    bad = [s for s in args.seeds if not 0 <= s < SEED_LIMIT]  # only the first is run as a check
    if bad:
        raise UserError(f"--seeds {bad[0]}: out of range, each seed must be an integer in "
                        "[0, 2^63) (run.seed)")
    check_flags(args, at_least={"workers": 1, **({} if args.parallel is None
                                                  else {"parallel": 1})})
    if args.ray_address and args.executor != "ray":
        raise UserError("--ray-address: applies to --executor ray (the seeds would run as "
                        "local processes); pass --executor ray or drop the address")
    not_blank(args.out, "--out", "the study's directory")
    out = output_dir(args.out, "--out")
    opts = StudyOptions(args.seeds, args.generations, args.config, args.archive, args.executor,
                        args.ray_address, args.workers, args.parallel, args.data,
                        args.head_seconds)
    done = study(opts, out, lambda m: print(m, flush=True),
                 lambda m: print(m, file=sys.stderr, flush=True))
    if done.signum is not None:
        name = signal.Signals(done.signum).name
        print(f"evolve study: stopped by {name}; finished seeds are kept in {out} and the "
              "others resume where they stopped: run the same command again", file=sys.stderr)
        return 128 + done.signum
    if done.results:
        lines = ["| run | split | " + " | ".join(label for _k, label in METRICS) +
                 " | failed |", "|---|---|" + "---|" * (len(METRICS) + 1)]
        for r in done.rows:
            cells = [_short(r.name), r.split,
                     *(f"{med:.1f} [{lo:.1f}, {hi:.1f}]" for med, lo, hi in r.ape.values()),
                     f"{r.failed:.0f}/{r.measured_failed:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
        print(f"\nmedian [min, max] APE (%) of the picks over seeds "
              f"{', '.join(map(str, done.results))}, closed loop:\n" + "\n".join(lines))
    for line in done.failed:
        print(line, file=sys.stderr)
    return 1 if done.failed or not done.results else 0


def _short(name: str) -> str:
    """``20260217-155451-llama-2-7b-tp1-codegen`` -> ``llama-2-7b-tp1-codegen``."""
    return re.sub(r"^\d{8}-\d{6}-", "", name)
