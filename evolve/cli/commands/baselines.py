"""``evolve baselines``: the published step-time models, closed loop, on every run.

Why: every claim that an evolved program is better needs the same simulator and the same
metrics applied to the models people use today (BLIS trained-physics and roofline, and a
per-model linear model fitted to the train runs).
"""

from __future__ import annotations

import argparse
import json
import sys

from evolve.cli.output import num, pct, table
from evolve.text.words import run_label
from evolve.workflows.targets import add_simulator_flags, on_all_cores, simulator_options

HELP = "closed-loop scores of the published models on every measured run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--only", choices=["trained-physics", "roofline", "linear"],
                        action="append", help="run only these baselines (repeatable)")


def run(args: argparse.Namespace) -> int:
    from evaluator.api import Evaluator, baseline_models

    ev = on_all_cores(Evaluator.from_data(args.data, **simulator_options(args)))
    fits = "" if args.only and "linear" not in args.only else "fitting the linear baseline and "
    print(f"loaded {len(ev.scenarios)} runs; {fits}simulating...", file=sys.stderr)
    unfitted = sorted({s.model for s in ev.scenarios} - {s.model for s in ev.scenarios
                                                         if s.split == "train"})
    if fits and unfitted:  # fitted per model on its train runs: none, no fit (said)
        print(f"note: no train run of {', '.join(unfitted)}: the linear baseline keeps its "
              "initial constants there", file=sys.stderr)
    out: dict[str, dict[str, dict]] = {}
    for name, (model, consts) in baseline_models(ev, only=args.only).items():
        def progress(run_name: str, name: str = name) -> None:
            print(f"  {name}: {run_name}", file=sys.stderr)

        sims = ev.simulate(model, consts, progress=progress)
        out[name] = {run: res.metrics.to_dict() for run, res in sims.items()}
    if args.json:
        json.dump(out, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    for name, runs in out.items():
        rows = []
        for run_name, m in runs.items():
            p, me, a = m["pred"], m["meas"], m["ape"]
            short = run_label(run_name)
            rows.append([short, m["split"], num(me.get("e2e_mean"), 3),
                         num(p.get("e2e_mean"), 3), pct(a.get("e2e_mean")),
                         num(me.get("ttft_mean"), 4), num(p.get("ttft_mean"), 4),
                         pct(a.get("ttft_mean")),
                         f"{p.get('failures', 0):.0f}/{me.get('failures', 0):.0f}",
                         m["reason"] or ""])
        normal = [m for m in runs.values() if "reasoning" not in m["name"]]
        ok = sum(1 for m in normal if m["ape"].get("e2e_mean", 1) < 0.10)
        print(f"\n== {name}: {ok} of {len(normal)} non-reasoning runs within 10% mean E2E "
              "(closed loop; times in s)")
        print(table(["run", "split", "E2E meas", "E2E pred", "APE", "TTFT meas", "TTFT pred",
                     "APE", "failed sim/meas", "note"], rows, right=range(2, 9)))
    return 0
