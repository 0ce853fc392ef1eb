"""``evolve data``: the experiments of a data directory, as every command will see them.

Why: after ``evolve ingest`` a user checks that their run is there and reads as they
meant it: model, GPU, TP, load stages, how many requests and how many failed, how many
distinct prompts they repeat (cached whole by the simulator; ``-``: none inferred), which
split the search will use it for. Each experiment is loaded with the same loader the
search uses, so a run listed here is a run ``evolve run --data`` accepts (and a broken
one fails here with the same one-line error).

It also says how typical of its load stage each stage's fitting slice is (the window the
closed-loop fitness simulates, ``fit.slice_seconds`` mid-stage; defaults here): the slice's
measured mean TTFT over the whole stage's. Why: a slice that holds a transient (a burst of
arrivals that queues at the sequence cap) weighs it several times its share of the stage,
and a fit then chases it at the other runs' expense (docs/selection.md, "A fold's own
runs"). A run whose measured mean TTFT says it queues throughout is not sliced by the
search (``evolve.search.context.sliced``), so it gets no ratio.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaluator.api import Scenario

HELP = "list the experiments in a data directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from evaluator.api import data_dir, load_scenarios
    from evolve.cli.output import print_json, table
    from evolve.config.schema import FitSection
    from evolve.search.context import sliced

    root = data_dir(args.data)
    rows = []
    for sc in load_scenarios(root):
        status = sc.meta.get("status")
        failed = Counter(s for s in status if s != "ok") if status else Counter(
            {"failed": int(sc.measured.failed.sum())} if sc.measured.failed.any() else {})
        rows.append({
            "name": sc.name, "split": sc.split, "model": sc.model,
            "model_id": sc.meta.get("model_id", ""), "gpu": sc.hardware.name,
            "tp": sc.server.tp, "workload": sc.workload,
            "stages": [{"rate": s.rate, "duration_s": s.duration_s} for s in sc.stages],
            "requests": sc.n_requests, "failed": int(sc.measured.failed.sum()),
            "failed_by_status": dict(failed), "format": sc.meta.get("format", "bundled"),
            "prompts": (0 if sc.prompt_id is None else len(set(sc.prompt_id.tolist()))),
            "notes": list(sc.meta.get("notes") or []),
            "slice_ttft_ratio": (slice_ratios(sc, FitSection.slice_seconds,
                                              FitSection.slice_warmup_seconds)
                                 if sliced(sc) else None)})
    if args.json:
        print_json({"data": str(root), "experiments": rows})
        return 0
    if not rows:
        print(f"{root}: no experiments")
        return 0
    headers = ["experiment", "split", "model", "GPU", "TP", "load stages (rps x s)",
               "requests", "prompts", "failed", "slice TTFT / stage", "source"]
    body = [[r["name"], r["split"], r["model"], r["gpu"], r["tp"],
             ", ".join(f"{s['rate']:g}x{s['duration_s']:g}" for s in r["stages"]),
             r["requests"], r["prompts"] or "-", r["failed"] if not r["failed_by_status"] or set(
                 r["failed_by_status"]) == {"failed"} else
             f"{r['failed']} (" + ", ".join(f"{k} {v}" for k, v in
                                            sorted(r["failed_by_status"].items())) + ")",
             _ratios(r["slice_ttft_ratio"]),
             "ingested" if r["format"] != "bundled" else "bundled"] for r in rows]
    print(f"{root}: {len(rows)} experiments")
    print(table(headers, body, right=(4, 6, 7)))
    for r in rows:
        for k, v in enumerate(r["slice_ttft_ratio"] or []):
            if v is not None and not ATYPICAL[0] <= v <= ATYPICAL[1]:
                print(f"{r['name']}: the fitting slice of stage {k + 1} is not typical of its "
                      f"stage (mean TTFT {v:.1f}x the stage's); closed-loop fits weigh it "
                      "as the whole stage")
    return 0


ATYPICAL = (2.0 / 3.0, 1.5)  # slice/stage mean-TTFT ratios outside this are named


def slice_ratios(sc: Scenario, width_s: float, warmup_s: float) -> list[float | None]:
    """Per load stage: the measured mean TTFT of its fitting slice (``stage_slices``) over
    that of every request arriving in the stage (the last one keeps late arrivals, as
    ``stage_of`` does), both as ``Scenario.window`` aggregates them; None where either
    has no TTFT."""
    out: list[float | None] = []
    edge = 0.0
    for k, sl in enumerate(sc.stage_slices(width_s, warmup_s)):
        end = edge + sc.stages[k].duration_s if k + 1 < len(sc.stages) else float("inf")
        whole = sc.window(edge, end, keep_name=True).measured.summary.get("ttft_mean")
        part = sl.measured.summary.get("ttft_mean")
        out.append(float(part / whole) if part is not None and whole else None)
        edge += sc.stages[k].duration_s
    return out


def _ratios(values: list[float | None] | None) -> str:
    return "-" if not values else ", ".join("-" if v is None else f"{v:.2f}" for v in values)
