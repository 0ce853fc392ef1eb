"""``evolve runs``: list the runs in an archive."""

from __future__ import annotations

import argparse

HELP = "list the runs in the archive"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from evolve.archive import Archive
    from evolve.cli.output import num, print_json, short, table

    out = []
    with Archive(args.archive, create=False) as archive:
        for r in archive.runs():
            front = archive.frontier(r.id)
            best = min(front, key=lambda f: (f.loss, f.program_id), default=None)
            pick = next((f for f in front if f.picked), None)
            cfg = r.config or {}
            fell = (archive.llm_fallback_generation(r.id)
                    if cfg.get("operator", {}).get("kind") == "llm" else None)
            out.append({"id": r.id, "seed": r.seed, "status": r.status,
                        "generations_done": r.generations_done,
                        "generations": cfg.get("run", {}).get("generations"),
                        "operator": cfg.get("operator", {}).get("kind"),
                        "programs": len(archive.programs(r.id)),
                        "best_id": best.program_id if best else None,
                        "best_loss": best.loss if best else None,
                        "pick_id": pick.program_id if pick else None,
                        "created_at": r.created_at, "finished_at": r.finished_at,
                        "code_version": r.code_version, "llm_fallback_generation": fell})
    if args.json:
        print_json(out)
        return 0
    if not out:
        from evolve.text.untrusted import mask_secrets

        print(f"{mask_secrets(args.archive)}: no runs")  # a server URL: its password masked
        return 0
    headers = ["run", "seed", "status", "gens", "operator", "programs", "best loss", "best",
               "pick", "created (UTC)", "code"]
    rows = [[o["id"], o["seed"], o["status"], f"{max(o['generations_done'], 0)}/"
             f"{o['generations']}", o["operator"], o["programs"], num(o["best_loss"]),
             short(o["best_id"]), short(o["pick_id"]), o["created_at"], o["code_version"]]
            for o in out]
    print(table(headers, rows, right=(0, 1, 3, 5, 6)))
    for o in out:
        if o["llm_fallback_generation"] is not None:
            print(f"run {o['id']}: the LLM endpoint failed in generation "
                  f"{o['llm_fallback_generation']}; later children came from the offline "
                  "operator")
    return 0
