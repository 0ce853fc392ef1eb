"""``evolve run``'s work: the configuration from the flags, a TOML file or a stored run, then
the search.

:func:`configure` turns the flags (:class:`RunOptions`) into a config fragment, applies it
to the TOML file's configuration (a new run) or to the stored run's (``--resume``, where
only the keys in :data:`RESUMABLE` may change) and validates it: a :class:`RunPlan`.
:func:`execute` checks what a search would find too late (the data directory, an
unwritable report or cassette, an LLM endpoint nobody listens at), starts a local llama.cpp
server for ``--llm local``, runs the search under the stop signals and the optional live
report, and fills a :class:`RunOutcome`. Nothing here prints: the lines the command shows
go through ``say``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evolve.errors import UserError
from evolve.workflows.targets import not_blank

if TYPE_CHECKING:
    from evolve.config.llm import LLMConfig
    from evolve.config.schema import Config
    from evolve.search.loop import RunSummary
    from evolve.search.stopping import StopRequested

Say = Callable[[str], None]

LOCAL = "local"  # --llm local: start a llama.cpp server for the run
LOCAL_MAX_TOKENS = 400
LOCAL_TIMEOUT_S = 300.0

# Keys that may change when resuming: they decide how long and how fast, not what is found.
RESUMABLE = {"run": {"generations", "data", "archive", "workers", "wall_time_s", "progress",
                     "executor", "ray_address", "force_workers"},
             "llm": {"base_url", "cassette", "cassette_mode", "gguf", "timeout_s"}}


@dataclass
class RunOptions:
    """What ``evolve run`` was asked for: its flags, by their argparse names (None: not
    given)."""

    config: str | None = None
    resume: int | None = None  # 0: the archive's latest run
    break_lock: bool = False
    report: str | None = None
    generations: int | None = None
    seed: int | None = None
    data: str | None = None
    archive: str | None = None
    head_seconds: float | None = None
    workers: int | None = None
    wall_time: float | None = None
    executor: str | None = None
    ray_address: str | None = None
    force_workers: bool = False
    no_progress: bool = False
    no_prompt_cache: bool = False
    no_async_scheduling: bool = False
    loop: str | None = None
    transfer: float | None = None
    llm: str | None = None
    llm_base_url: str | None = None
    llm_share: float | None = None
    llm_gguf: str | None = None
    constrain: str | None = None
    prompt_profile: str | None = None
    cassette: str | None = None
    record: bool = False
    replay: bool = False


@dataclass
class RunPlan:
    """The checked configuration of the run to start (``resume`` None) or continue."""

    cfg: Config
    resume: int | None
    over: dict[str, dict[str, Any]]  # the command line's config fragment
    source: str | None  # where run.data comes from when not from the command line
    hint: str = ""  # added to a missing data directory's message


@dataclass
class RunOutcome:
    """What the search reached; filled in as it goes, so a stop or an error can say how to
    go on."""

    cfg: Config
    where: str | None = None  # the archive as opened (a URL without its password)
    run_id: int | None = None
    searching: bool = False  # from here on an error leaves journaled work to resume
    summary: RunSummary | None = None
    stopped: StopRequested | None = None  # a stop signal ended the search

    def resume_command(self) -> str:
        return resume_command(self.cfg, int(str(self.run_id)), str(self.where))

    def resumable(self, exc: BaseException) -> bool:
        """Whether ``exc`` (the archive or the cluster went away, a bug) left journaled work
        that a resume continues (not bad input, which a resume would only repeat)."""
        from evolve.errors import ClusterLost, EvolveError

        return (self.run_id is not None and self.searching
                and (isinstance(exc, ClusterLost) or not isinstance(exc, EvolveError)))


def overrides(opts: RunOptions, say: Say) -> dict[str, dict[str, object]]:
    """Command-line values as a config fragment (only the flags that were given)."""
    out: dict[str, dict[str, object]] = {"run": {}, "operator": {}, "llm": {}, "fit": {}}
    not_blank(opts.data, "--data", "a data directory")
    not_blank(opts.archive, "--archive", "a file or URL")
    for flag, key in (("generations", "generations"), ("seed", "seed"), ("data", "data"),
                      ("archive", "archive"), ("head_seconds", "head_seconds"),
                      ("workers", "workers"), ("wall_time", "wall_time_s"),
                      ("executor", "executor"), ("ray_address", "ray_address")):
        if getattr(opts, flag) is not None:
            out["run"][key] = getattr(opts, flag)
    if opts.transfer is not None:
        out["fit"]["transfer_weight"] = opts.transfer
    if opts.no_progress:
        out["run"]["progress"] = False
    if opts.no_prompt_cache:
        out["run"]["prompt_cache"] = False
    if opts.no_async_scheduling:
        out["run"]["async_scheduling"] = False
    if opts.loop is not None:
        out["run"]["loop"] = opts.loop
    if opts.force_workers:
        out["run"]["force_workers"] = True
    if opts.ray_address and opts.executor is None:  # an address means Ray
        out["run"]["executor"] = "ray"
    if opts.llm is not None and not opts.llm.strip():  # an unset shell variable, usually
        raise UserError("--llm: blank; name the endpoint's model (or `--llm local`)")
    if opts.llm:
        out["operator"]["kind"] = "llm"
        out["llm"]["model"] = opts.llm
    if opts.llm_share is not None:
        out["operator"]["llm_share"] = opts.llm_share
    if opts.llm_base_url:
        out["llm"]["base_url"] = _endpoint_url(opts.llm_base_url, say)
    if opts.llm_gguf:
        out["llm"]["gguf"] = opts.llm_gguf
    if opts.constrain:
        out["llm"]["constrain"] = opts.constrain
    elif opts.llm == LOCAL:
        out["llm"]["constrain"] = "gbnf"  # llama.cpp takes GBNF; off only when asked
    if opts.prompt_profile:
        out["llm"]["prompt_profile"] = opts.prompt_profile
    if opts.cassette:
        out["llm"]["cassette"] = opts.cassette
    if opts.record or opts.replay:
        if not opts.cassette:
            raise UserError("--record/--replay need --cassette F")
        out["llm"]["cassette_mode"] = "record" if opts.record else "replay"
    return {k: v for k, v in out.items() if v}


def configure(opts: RunOptions, say: Say) -> RunPlan:
    """The checked configuration: the TOML file's (or the defaults) with the flags applied,
    or, with ``--resume``, the stored run's with the flags that may change; ``say`` gets
    the notes on the flags."""
    from evolve.config.schema import Config, apply_dict, load_config, validate

    over = overrides(opts, say)
    if opts.break_lock and opts.resume is None:
        raise UserError("--break-lock needs --resume [RUN_ID]")
    if opts.resume is None:
        cfg = load_config(opts.config)
        apply_dict(cfg, over, "command line")
        _local_defaults(cfg)
        validate(cfg, "command line")
        return RunPlan(cfg, None, over, opts.config)

    from evolve.archive import Archive

    if opts.config:
        raise UserError("--config cannot be combined with --resume (the run's stored "
                        "configuration is used)")
    path = over.get("run", {}).get("archive") or "archive.db"
    with Archive(str(path), create=False) as archive:
        run_id = archive.latest_run_id() if opts.resume == 0 else opts.resume  # bare: latest
        stored = archive.run(run_id).config
    for section, values in over.items():
        # the original command line with --resume added repeats stored values: fine
        bad = sorted(k for k, v in values.items() if k not in RESUMABLE.get(section, set())
                     and stored.get(section, {}).get(k) != v)
        if bad:
            raise UserError(f"--resume: cannot change {section}.{bad[0]} of a stored run")
    _masked_endpoint(stored, over, run_id)
    cfg = Config.from_dict(stored, f"{path} run {run_id}")
    cfg.run.archive = str(path)
    apply_dict(cfg, over, "command line")
    validate(cfg, "command line")
    return RunPlan(cfg, run_id, over, f"{path} run {run_id}", "; pass --data DIR if it moved")


def _endpoint_url(url: str, say: Say) -> str:
    """``--llm-base-url`` without ``user:password@``, which evolve neither stores nor sends
    (an HTTP client sends it as Basic auth in place of the key; docs/llm.md), said once."""
    from evolve.text.untrusted import has_userinfo, strip_userinfo

    if has_userinfo(url):
        say("note: --llm-base-url: the user:password@ part is dropped, never stored or sent; "
            "put the key in the variable llm.api_key_env names (default OPENAI_API_KEY)")
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


def _check_data(plan: RunPlan) -> None:
    """A missing data directory named by ``run.data`` of a config file or a stored run is
    blamed on that key, not on --data or EVOLVE_DATA, which the user did not give."""
    from evaluator.api import DataError, data_dir

    cfg = plan.cfg
    if not cfg.run.data or "data" in plan.over.get("run", {}) or plan.source is None:
        return  # from --data, EVOLVE_DATA or the default: data_dir's own message says so
    try:
        data_dir(cfg.run.data, plan.hint)
    except DataError as exc:
        raise UserError(f"{plan.source}: key 'run.data': {exc}") from None


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


def execute(plan: RunPlan, report: str | None, break_lock: bool, done: RunOutcome,
            say: Say) -> None:
    """Check, then search: ``done`` gets the archive, the run and the summary (or the stop
    signal that ended the search); ``say`` the local server's and the run's lines."""
    import dataclasses

    from evaluator.api import data_dir
    from evolve.search.stopping import StopRequested, stop_signals
    from evolve.workflows.targets import output_dir, output_file

    cfg = plan.cfg
    _check_data(plan)
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
    from evolve.search.execution.executors import serves_local_model

    try:
        with stop_signals():
            if serves_local_model(cfg):
                from evolve.operators.llm.local.server import LocalServer, llama_threads

                with LocalServer(cfg.llm.gguf, seed=cfg.run.seed,
                                 threads=llama_threads(cfg.run.workers)) as server:
                    say(f"local model {server.gguf.name} at {server.base_url}")
                    llm = dataclasses.replace(
                        cfg.llm, base_url=server.base_url,
                        context_tokens=cfg.llm.context_tokens or server.n_ctx)
                    done.summary = _search(plan, report, break_lock, done, llm, say)
            else:
                done.summary = _search(plan, report, break_lock, done, None, say)
    except StopRequested as stop:
        done.stopped = stop


def _reachable(url: str) -> None:
    """Fail before generation 0 (a minute of work) when nothing listens at the endpoint's
    address; a TCP connection only, so any server, and what it answers, is left alone. An
    endpoint that fails later in the run is still taken over by the offline operator."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=10).close()
    except OSError as exc:
        raise UserError(f"LLM endpoint {url}: cannot connect ({exc.strerror or exc}); "
                        "check the endpoint with `evolve llm-check`, or run without --llm"
                        ) from None


def _search(plan: RunPlan, report: str | None, break_lock: bool, done: RunOutcome,
            llm: LLMConfig | None, say: Say) -> RunSummary:
    from evolve.archive import Archive
    from evolve.search.loop import Search

    cfg, resume = plan.cfg, plan.resume
    with Archive(cfg.run.archive, create=resume is None) as archive:
        done.where = str(archive.path)
        if resume is not None:
            done.run_id = resume
            run = archive.run(resume)
            search = Search(cfg, archive, run_id=resume, break_lock=break_lock, llm=llm)
            # under the run's lock; a target below what is done computes nothing and
            # leaves the run as it was (found in review: it stored "5/2")
            if (run.config != cfg.stored_dict()
                    and cfg.run.generations >= run.generations_done):
                archive.update_run(resume, config=cfg.stored_dict())
        else:
            def started(run_id: int) -> None:
                done.run_id = run_id

            search = Search(cfg, archive, on_run=started, llm=llm)
        say(f"run {search.run_id}" + (" (resumed)" if resume is not None else "")
            + f" -> {archive.path}")  # a URL without its password
        done.searching = True  # from here on an error leaves journaled work to resume
        if report:  # evolve.report reads the archive in a thread; the search never sees it
            from evolve.report import LiveReport

            with LiveReport(cfg.run.archive, search.run_id, report):
                return search.run()
        return search.run()
