"""``evolve replay ID``: rebuild a stored evaluation's corpora and re-score; diff on mismatch.

Why it exists: a score is only trustworthy if it can be recomputed. The archive stores,
for every corpus version, the program and constants that simulated it; replay re-simulates
that version closed loop, checks its content hash, re-scores the program with its stored
constants, and requires the per-scenario metrics and the loss to match bit for bit.
"""

from __future__ import annotations

import argparse
from typing import Any

from evolve.text.words import EvalStatus

HELP = "re-score an archived program; non-zero on mismatch"
MAX_DIFF_LINES = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="program id or a unique prefix of it")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--run", type=int, metavar="ID",
                        help="run whose evaluation to replay (default: the latest run that "
                        "accepted the program)")
    parser.add_argument("--data", metavar="DIR", help="data directory (default: the run's)")
    parser.add_argument("--all", action="store_true",
                        help="replay every accepted evaluation, not just the latest")


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def diff(stored: Any, replayed: Any) -> list[str]:
    """Dotted paths whose values differ, as 'path: stored -> replayed' lines."""
    a, b = _flatten(stored), _flatten(replayed)
    return [f"{k}: {a.get(k, '<missing>')!r} -> {b.get(k, '<missing>')!r}"
            for k in sorted(set(a) | set(b)) if repr(a.get(k)) != repr(b.get(k))]


def run(args: argparse.Namespace) -> int:
    import json

    from evolve.archive import Archive
    from evolve.config.schema import Config
    from evolve.errors import ArchiveError
    from evolve.search.context import make_context
    from evolve.search.corpora import refresh
    from evolve.search.judge import score_program
    from evolve.search.setup import load_evaluator, require_scenarios
    from evolve.text.canonical import canonical_json
    from evolve.text.untrusted import printable
    from evolve.workflows.targets import parse_stored

    with Archive(args.archive, create=False) as archive:
        pid = archive.resolve_id(args.id, args.run)
        runs = [args.run] if args.run is not None else sorted(
            {e.run_id for e in archive.evaluations_of(pid) if e.status == EvalStatus.ACCEPTED},
            reverse=True)
        evals = (archive.evaluations(runs[0], program_id=pid, status=EvalStatus.ACCEPTED)
                 if runs else [])
        if not evals:
            raise ArchiveError(f"{args.archive}: program {pid[:12]} has no accepted evaluation"
                               + (f" in run {args.run}" if args.run is not None else ""))
        rid = runs[0]
        run_row = archive.run(rid)
        corpora = archive.corpus_versions(rid)
        sources = {p.id: p.source for p in archive.programs(rid)}
    cfg = Config.from_dict(run_row.config, f"{args.archive} run {rid}")
    if args.data:
        cfg.run.data = args.data
    where = f"archive {args.archive}"
    program = parse_stored(sources[pid], pid, where)  # before the (slow) simulations
    evaluator = load_evaluator(cfg)
    require_scenarios(evaluator, run_row.splits, rid)
    ctx = make_context(cfg, evaluator, dict(run_row.splits))
    if program.id != pid:
        raise ArchiveError(f"program {pid[:12]}: stored source now normalises to "
                           f"{program.id[:12]} (language changed)")
    todo = evals if args.all else evals[-1:]
    failures = 0
    for ev in sorted(todo, key=lambda e: (e.corpus_version, e.generation, e.seq)):
        if ctx.evaluator.corpus_version != ev.corpus_version:
            row = next((c for c in corpora if c.version == ev.corpus_version and c.adopted),
                       None)
            if row is None:
                raise ArchiveError(f"run {rid}: corpus version {ev.corpus_version} of "
                                   f"generation {ev.generation} is not recorded")
            ctx.window_steps = row.window_steps
            version, _closed = refresh(ctx, parse_stored(sources[row.program_id],
                                                         row.program_id, where),
                                       row.constants, row.scope)
            if version != row.version:
                print(printable(f"run {rid} gen {ev.generation}: corpus version {version} != "
                                f"stored {row.version} (simulation not reproduced)"))
                failures += 1
                continue
        res = score_program(ctx, program, ev.constants)
        stored = {"loss": ev.loss, "metrics": ev.metrics}
        again = json.loads(canonical_json({"loss": res.loss, "metrics": res.metrics}))
        lines = diff(stored, again)
        where = printable(f"{pid[:12]} run {rid} gen {ev.generation} ({ev.kind}, corpus "
                          f"{ev.corpus_version})")
        if lines:
            failures += 1
            print(f"MISMATCH {where}: {len(lines)} values differ")
            for line in lines[:MAX_DIFF_LINES]:
                print(f"  {printable(line)}")
        else:
            print(f"ok {where}: loss {ev.loss!r} and {len(ev.metrics or {})} runs' metrics "
                  "reproduced exactly")
    return 1 if failures else 0
