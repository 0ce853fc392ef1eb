"""``evolve show ID``: one program's source, constants, scores and lineage."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "show one program: source, constants, scores, lineage"
MAX_LINEAGE = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="program id or a unique prefix of it")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--run", type=int, metavar="ID", help="only this run")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _lineage(pid: str, by_id: dict[str, Any]) -> list[dict[str, Any]]:
    """The chain of first parents back to a seed (or to a program from outside the run)."""
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while pid in by_id and pid not in seen and len(chain) < MAX_LINEAGE:
        seen.add(pid)
        row = by_id[pid]
        chain.append({"id": pid, "generation": row.generation, "operator": row.operator,
                      "parents": list(row.parent_ids)})
        if not row.parent_ids:
            break
        pid = row.parent_ids[0]
    return chain


def run(args: argparse.Namespace) -> int:
    from evolve.archive import Archive
    from evolve.archive.ids import check_source
    from evolve.errors import ArchiveError

    with Archive(args.archive, create=False) as archive:
        pid = archive.resolve_id(args.id, args.run)
        rows = archive.program(pid, args.run)
        if not rows:
            raise ArchiveError(f"{args.archive}: program {pid[:12]} is not in run {args.run}")
        for prow in rows:  # an edited source is not shown as the program it claims to be
            check_source(pid, prow.source, f"archive {archive.path} run {prow.run_id}")
        runs = []
        for prow in rows:
            by_id = {p.id: p for p in archive.programs(prow.run_id)}
            evals = archive.evaluations(prow.run_id, program_id=pid)
            accepted = [e for e in evals if e.status == "accepted"]
            last = accepted[-1] if accepted else None
            runs.append({
                "run": prow.run_id, "generation": prow.generation, "operator": prow.operator,
                "parents": list(prow.parent_ids), "lineage": _lineage(pid, by_id),
                "evaluations": [{"generation": e.generation, "kind": e.kind,
                                 "status": e.status, "loss": e.loss, "reason": e.reason,
                                 "corpus_version": e.corpus_version} for e in evals],
                "constants": last.constants if last else None,
                "metrics": last.metrics if last else None,
                "constants_generation": last.generation if last else None})
    info = {"id": pid, "source": rows[0].source, "complexity": rows[0].complexity,
            "runs": runs}
    if args.json:
        from evolve.cli.output import print_json

        print_json(info)
        return 0
    _print(info)
    return 0


def _print(info: dict[str, Any]) -> None:
    """The text form. Every string from the archive goes through ``printable`` (an
    operator name, a reason, a group or run name may hold a terminal escape)."""
    from evolve.cli.output import num, pct, short, table
    from evolve.text.untrusted import printable as p

    cx = info["complexity"]
    print(f"program {info['id']}" + (f"  (complexity {cx})" if cx is not None else
                                      "  (does not parse)"))
    print()
    for line in info["source"].rstrip().splitlines():
        print(f"    {p(line, lines=True)}")
    for r in info["runs"]:
        print(f"\nrun {r['run']}: first seen in generation {r['generation']} from "
              f"{p(r['operator'])}" + (f", parents {', '.join(short(q) for q in r['parents'])}"
                                       if r["parents"] else ""))
        print("  lineage: " + " <- ".join(
            f"{short(x['id'])} (g{x['generation']} {p(x['operator'])})" for x in r["lineage"]))
        for e in r["evaluations"]:
            why = f": {p(e['reason'])}" if e["reason"] else ""
            print(f"  gen {e['generation']:>3} {p(e['kind']):<7} {p(e['status']):<8} "
                  f"loss {num(e['loss'])}{why}")
        if r["constants"]:
            print(f"  constants (generation {r['constants_generation']}):")
            for group, consts in sorted(r["constants"].items()):
                vals = ", ".join(f"{p(k)}={v:.6g}" for k, v in sorted(consts.items()))
                print(f"    {p(group)}: {vals}")
        if r["metrics"]:
            body = [[name, m.get("split", ""), pct(m.get("ape", {}).get("e2e_mean")),
                     pct(m.get("ape", {}).get("ttft_mean")),
                     pct(m.get("ape", {}).get("itl_mean")),
                     pct(m.get("ape", {}).get("e2e_p90")), m.get("reason", "")]
                    for name, m in sorted(r["metrics"].items(),
                                          key=lambda kv: (kv[1].get("split", ""), kv[0]))]
            print("  scores (APE; closed-loop stage slices, or teacher-forced windows for "
                  "queue-dominated runs):")
            print("    " + table(["scenario", "split", "E2E", "TTFT", "ITL", "E2E p90", ""],
                               body, right=(2, 3, 4, 5)).replace("\n", "\n    "))
