"""``evolve data``: the experiments of a data directory, as every command will see them.

Why: after ``evolve ingest`` a user checks that their run is there and reads as they
meant it: model, GPU, TP, load stages, how many requests and how many failed, how many
distinct prompts they repeat (cached whole by the simulator; ``-``: none inferred), which
split the search will use it for. Each experiment is loaded with the same loader the
search uses, so a run listed here is a run ``evolve run --data`` accepts (and a broken
one fails here with the same one-line error).
"""

from __future__ import annotations

import argparse
from collections import Counter

HELP = "list the experiments in a data directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from evaluator.api import data_dir, load_scenarios
    from evolve.reporting import print_json, table

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
            "notes": list(sc.meta.get("notes") or [])})
    if args.json:
        print_json({"data": str(root), "experiments": rows})
        return 0
    if not rows:
        print(f"{root}: no experiments")
        return 0
    headers = ["experiment", "split", "model", "GPU", "TP", "load stages (rps x s)",
               "requests", "prompts", "failed", "source"]
    body = [[r["name"], r["split"], r["model"], r["gpu"], r["tp"],
             ", ".join(f"{s['rate']:g}x{s['duration_s']:g}" for s in r["stages"]),
             r["requests"], r["prompts"] or "-", r["failed"] if not r["failed_by_status"] or set(
                 r["failed_by_status"]) == {"failed"} else
             f"{r['failed']} (" + ", ".join(f"{k} {v}" for k, v in
                                            sorted(r["failed_by_status"].items())) + ")",
             "ingested" if r["format"] != "bundled" else "bundled"] for r in rows]
    print(f"{root}: {len(rows)} experiments")
    print(table(headers, body, right=(4, 6, 7)))
    return 0
