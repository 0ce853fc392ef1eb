"""Does a cheap transfer loss rank a run's programs by their real leave-one-model-out?

Usage::

    python scripts/transfer_rank.py ARCHIVE [--run N] [--out DIR] [--data DIR] [--top N]
                                    [--max-evals 3000] [--polish-evals 60] [--json]

For every hall-of-fame member of the run's last generation, ``evolve generalize ID --mode
lomo --unseen global --json`` (cached in ``--out``, default ``ARCHIVE.lomo/``; the held-out
model gets the program's own global set, which is what a transfer loss predicts) gives
the real figure: its
held-out normal runs within 10 % mean E2E (``count``) and their RMS mean-E2E APE (``rms``,
each capped at 1000 %). Beside it, three teacher-forced losses of each held-out model's
*training* runs, on the run's last corpora, under one global set per fold fitted

* ``search``: as the search's transfer loss does (``evolve.search.transfer``: training runs
  only, the run's corpora, ``fit.max_evals``, one start);
* ``lomo_train``: as ``evolve generalize`` does (``refit_fold``: the program's own
  batches, ``--max-evals``, no polish, which leaves a pooled program's global set alone),
  but on training runs only;
* ``lomo``: the fold constants ``evolve generalize`` fitted itself (every normal run
  outside the fold, validate split included, then polished).

and their Spearman correlations with ``count`` and ``rms``. docs/selection.md quotes them for
the seed-7 ``--transfer 1`` run: what limits ``search`` is the fit, not teacher forcing
(``lomo`` ranks at 0.90), and most of the gap is which runs the fold is fitted on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from evaluator.api import loss
from evolve.archive import Archive
from evolve.config.schema import Config
from evolve.fitting import const_map
from evolve.fitting.refit import refit_fold
from evolve.program.codegen import step_model
from evolve.program.language import Program, parse_program
from evolve.search.context import RunContext, make_context
from evolve.search.corpora import refresh
from evolve.search.setup import load_evaluator
from evolve.search.transfer import transfer_metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import cli  # the public CLI, as the README's results use it

PROXIES = ("search", "lomo_train", "lomo")


def run_context(db: str, run_id: int | None, data: str) -> tuple[RunContext, dict[str, str]]:
    """The run's context on its last adopted corpora, and its programs' sources."""
    with Archive(db, create=False) as a:
        run = a.run(run_id or a.latest_run_id())
        adopted = [c for c in a.corpus_versions(run.id) if c.adopted]
        sources = {p.id: p.source for p in a.programs(run.id)}
    cfg = Config.from_dict(run.config)
    cfg.run.data = data
    ctx = make_context(cfg, load_evaluator(cfg), dict(run.splits))
    last = adopted[-1]
    refresh(ctx, parse_program(sources[last.program_id]), last.constants, last.scope)
    return ctx, sources


def held_out_loss(ctx: RunContext, program: Program, folds: dict[str, Any]) -> float:
    """Teacher-forced loss of each fold's model's training runs under the fold's global set."""
    ev, metrics = ctx.evaluator, {}
    for held, groups in folds.items():
        mine = [n for n in ctx.train if ev.by_name[n].model == held]
        metrics.update(ev.score(step_model(program), const_map(
            program, {"global": groups["global"]}, ev.scenarios, "global"), names=mine))
    return loss(metrics, sorted(metrics))


def proxies(ctx: RunContext, program: Program, groups: dict, lomo: dict,
            data_ev: Any, max_evals: int) -> dict[str, float]:
    ev = ctx.evaluator
    search = transfer_metrics(ctx, program)
    models = sorted({ev.by_name[n].model for n in ctx.train})
    train_folds = {}
    for held in models:
        rest = [n for n in ctx.train if ev.by_name[n].model != held]
        train_folds[held] = refit_fold(program, data_ev, rest, lomo["scope"], groups,
                                       lomo["seed"], max_evals, 0, ctx.prior_strength,
                                       ctx.pool_strength)
    return {"search": loss(search, sorted(search)),
            "lomo_train": held_out_loss(ctx, program, train_folds),
            "lomo": held_out_loss(ctx, program, {m: lomo["constants"][m] for m in models})}


def truth(lomo: dict) -> tuple[int, float]:
    apes = [r["ape"]["e2e_mean"] for fold in lomo["folds"].values()
            for name, r in fold.items() if "reasoning" not in name]
    return (sum(a <= 0.10 for a in apes),
            float(np.sqrt(np.mean(np.square(np.minimum(apes, 10.0))))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archive")
    ap.add_argument("--run", type=int, default=None, help="run id (default: the last)")
    ap.add_argument("--out", default=None, help="cache of LOMO JSONs (default ARCHIVE.lomo)")
    ap.add_argument("--data", default=None)
    ap.add_argument("--max-evals", type=int, default=3000)
    ap.add_argument("--polish-evals", type=int, default=60)
    ap.add_argument("--top", type=int, default=0,
                    help="only the N members of lowest search loss (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from evaluator.api import Evaluator
    from evaluator.data.scenarios import data_dir

    data = str(data_dir(args.data))
    out = Path(args.out or args.archive + ".lomo")
    out.mkdir(parents=True, exist_ok=True)
    run = ["--run", str(args.run)] if args.run else []
    members = json.loads(cli("frontier", "--archive", args.archive, *run, "--json"))["members"]
    if args.top > 0:
        members = sorted(members, key=lambda m: (m["loss"], m["id"]))[:args.top]
    ctx, sources = run_context(args.archive, args.run, data)
    data_ev = Evaluator.from_data(data)
    rows = []
    for m in members:
        path = out / f"{m['id'][:12]}.json"
        if not path.exists():
            print(f"generalize {m['id'][:12]}", file=sys.stderr, flush=True)
            path.write_text(cli("generalize", m["id"], "--archive", args.archive, *run,
                                "--mode", "lomo", "--unseen", "global", "--data", data,
                                "--max-evals",
                                str(args.max_evals), "--polish-evals",
                                str(args.polish_evals), "--json"))
        lomo = json.loads(path.read_text())
        program = parse_program(sources[m["id"]])
        count, rms = truth(lomo)
        rows.append({"id": m["id"][:12], "count": count, "rms": rms, **proxies(
            ctx, program, m["constants"], lomo, data_ev, args.max_evals)})
    rank = {p: {t: float(spearmanr([r[p] for r in rows], [r[t] for r in rows])[0])
                if len(rows) > 2 else float("nan") for t in ("count", "rms")}
            for p in PROXIES}
    if args.json:
        print(json.dumps({"programs": rows, "spearman": rank}, indent=1, sort_keys=True))
        return 0
    for r in rows:
        print(f"{r['id']}  count {r['count']:2d}  rms {r['rms']:7.3f}  " + "  ".join(
            f"{p} {r[p]:.3f}" for p in PROXIES))
    for p in PROXIES:
        print(f"spearman {p:10s} vs count {rank[p]['count']:+.2f}  vs rms {rank[p]['rms']:+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
