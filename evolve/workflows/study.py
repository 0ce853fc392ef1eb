"""``evolve study``'s work: independent runs of one configuration, seeds in parallel, and
each run's pick validated closed loop on every measured run.

Each seed is an island (its own population, no migration) run as its own ``evolve run``
process: with the local executor up to ``parallel`` seeds at a time, each with ``workers``
processes; with Ray every seed's driver joins one cluster (``ray_address``, or an instance
started here with every core), so the children of all seeds share its CPUs while each
driver keeps its operator (and LLM calls) and its archive. Then each pick is validated
(``evolve validate``).

Each seed writes ``OUT/seed-S.db`` (or one run in ``archive``, e.g. a PostgreSQL URL that
every seed writes to at once), ``OUT/seed-S.log`` and ``OUT/seed-S.json`` (its pick's
validation); a seed whose JSON exists is not run again, and a seed whose archive holds a
run of it is resumed (``evolve run --resume RUN``), so an interrupted study resumes: a stop
signal stops the seeds' searches at a safe point, starts no new seed, and the same command
continues. :func:`study` returns a :class:`StudyOutcome`; progress goes to callbacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.workflows.targets import output_file

METRICS = (("e2e_mean", "mean E2E"), ("ttft_mean", "mean TTFT"), ("itl_mean", "decode"),
           ("e2e_p99", "p99 E2E"))

Say = Callable[[str], None]


@dataclass
class StudyOptions:
    """What ``evolve study`` was asked for (its flags, checked)."""

    seeds: list[int] = field(default_factory=lambda: [7, 1, 2, 3, 4])
    generations: int | None = None
    config: str | None = None
    archive: str | None = None  # one archive for every seed; None: OUT/seed-S.db each
    executor: str = "local"
    ray_address: str | None = None
    workers: int = 1
    parallel: int | None = None  # None: local, cores / workers; ray, every seed
    data: str | None = None
    head_seconds: float | None = None


@dataclass
class SummaryRow:
    """One measured run of the seed-study table: each metric's APE in % over the seeds."""

    name: str
    split: str
    ape: dict[str, tuple[float, float, float]]  # metric -> (median, min, max), in %
    failed: float  # median simulated failures over the seeds
    measured_failed: float


@dataclass
class StudyOutcome:
    """Every seed's pick and its validation, or why it has none."""

    out: Path
    results: dict[int, dict[str, Any]]  # seed -> evolve validate's JSON of its pick
    failed: list[str]  # one line per seed that failed
    signum: int | None  # the stop signal that ended the study early, if one did
    rows: list[SummaryRow]  # the summary table (empty without results)


class _Stopping:
    """The children a study runs, so that a stop reaches them, and whether it stopped.

    Why: a stop used to end only the study's own process. SIGTERM left its `evolve run`
    running, re-parented to init (and a new study deleted its archive under it); Ctrl-C
    waited for every queued seed to finish first (found in review)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen] = set()
        self.signum: int | None = None

    def run(self, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        """``subprocess.run`` whose child a stop reaches; refuses to start once stopped."""
        with self.lock:
            if self.signum is not None:
                raise RuntimeError("stopped before it started")
            proc = subprocess.Popen(cmd, **kw)
            self.live.add(proc)
        try:
            out, err = proc.communicate()
        finally:
            with self.lock:
                self.live.discard(proc)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def stop(self, signum: int) -> None:
        """Pass the stop on to every running child (each stops at a safe point)."""
        with self.lock:
            self.signum = signum
            for proc in self.live:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)


_CHILDREN = _Stopping()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", *args]


def run_argv(opts: StudyOptions, seed: int, archive: str, ray_address: str,
             resume: int | None = None) -> list[str]:
    """The ``evolve run`` command line of one seed (``resume``: continuing that run, whose
    stored configuration stands for ``--config``; the rest must repeat it)."""
    cmd = ["run", "--seed", str(seed), "--archive", archive, "--no-progress",
           "--executor", opts.executor]
    cmd += (["--resume", str(resume)] if resume is not None
            else ["--config", opts.config] if opts.config else [])
    cmd += ["--generations", str(opts.generations)] if opts.generations is not None else []
    cmd += ["--data", opts.data] if opts.data else []
    cmd += (["--head-seconds", str(opts.head_seconds)] if opts.head_seconds is not None
            else [])  # 0 (whole runs) too: it overrides a config's cut
    cmd += ["--ray-address", ray_address] if ray_address else ["--workers", str(opts.workers)]
    return cmd


def study(opts: StudyOptions, out: Path, say: Say, warn: Say) -> StudyOutcome:
    """Check the settings once, run every seed (``parallel`` at a time), validate each
    pick, and write ``OUT/summary.json``; ``say`` gets the progress lines, ``warn`` the
    stop."""
    stamp = check_settings(opts, out)
    reusable(opts, out, stamp)
    ray_address = ""
    if opts.executor == "ray":
        from evolve.search.execution.ray_tasks import connect

        ray_address = connect(opts.ray_address or "", os.cpu_count() or 1)
        parallel = opts.parallel or len(opts.seeds)
        where = opts.ray_address or f"a Ray instance started here ({ray_address})"
    else:
        parallel = opts.parallel or max(1, (os.cpu_count() or 1) // opts.workers)
        where = f"local processes, {opts.workers} per seed"
    say(f"study: seeds {' '.join(map(str, opts.seeds))} ({parallel} in parallel), on "
        f"{where}; output in {out}")
    results, failed = run_seeds(opts, out, ray_address, stamp, parallel, say, warn)
    if _CHILDREN.signum is not None:
        return StudyOutcome(out, results, failed, _CHILDREN.signum, [])
    rows: list[SummaryRow] = []
    if results:
        rows, data = summary(results)
        (out / "summary.json").write_text(json.dumps(
            {"seeds": list(results), "picks": {s: r["program"] for s, r in results.items()},
             "ape": data}, indent=1, sort_keys=True))
    return StudyOutcome(out, results, failed, None, rows)


def check_settings(opts: StudyOptions, out: Path) -> str:
    """Let ``evolve run --print-config`` judge the settings every seed will get, so a bad
    one is one line now, not a failed subprocess per seed later; also the data directory
    and the archive's address, which it does not open. Returns the settings' stamp (a hash
    of the configuration without the seed and the speed knobs)."""
    import hashlib
    import tomllib

    from evaluator.api import data_dir
    from evolve.config.schema import NOT_STORED

    argv = run_argv(opts, opts.seeds[0], str(out / "settings-check.db"), "")
    done = subprocess.run(_cli(*argv, "--print-config"), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise UserError(lines[-1].removeprefix("evolve run: error: "))
    data_dir(opts.data)
    if opts.archive:
        _check_archive(opts.archive)
    cfg = tomllib.loads(done.stdout)
    for key in (*NOT_STORED, "seed"):
        cfg.get("run", {}).pop(key, None)
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def _check_archive(url: str) -> None:
    """The shared archive's address, and the file it names if it names one."""
    from evolve.archive.engines import locate

    try:
        loc = locate(url)
        loc.url.get_dialect()
    except Exception as exc:  # SQLAlchemy's plugin and URL errors vary
        raise UserError(f"--archive {url}: {exc}") from None
    path = loc.file
    if path is not None and (path.is_dir() or (path.exists() and path.stat().st_size)):
        from evolve.archive.store import Archive

        with Archive(url, create=False):  # a text file, a directory, another
            pass  # schema: one line now, not every seed's run failing in its log
    elif path is not None and not path.exists():
        output_file(path, "--archive")


def reusable(opts: StudyOptions, out: Path, stamp: str) -> None:
    """A seed finished by an earlier study is reused only if made with these settings."""
    for seed in opts.seeds:
        path = out / f"seed-{seed}.json"
        if path.exists():
            try:
                done = json.loads(path.read_text())
            except (OSError, ValueError):
                done = None
            if not (isinstance(done, dict) and isinstance(done.get("program"), str)
                    and isinstance(done.get("runs"), dict)):  # e.g. cut short by a full disk
                raise UserError(f"{path}: not the result of seed {seed} (unreadable or not "
                                "evolve validate's JSON); delete it to run the seed again")
            old = done.get("settings")
            if old not in (None, stamp):
                raise UserError(f"{path}: seed {seed} was run with other settings; pass a new "
                                "--out, or delete the file to run it again")


def run_seed(opts: StudyOptions, seed: int, out: Path, ray_address: str, stamp: str = "",
             say: Say = print) -> dict[str, Any]:
    """Search, then validate the pick, in subprocesses; returns the validation."""
    res_path, log_path = out / f"seed-{seed}.json", out / f"seed-{seed}.log"
    if res_path.exists():  # done by an earlier study (with these settings: reusable)
        return dict(json.loads(res_path.read_text()), reused=True)
    say(f"seed {seed}: started (progress in {log_path})")
    archive = opts.archive or str(out / f"seed-{seed}.db")
    t0 = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        done = _search(opts, seed, archive, ray_address, log)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed}: evolve run exited {done.returncode} (see {log_path})")
    run_id = re.search(r"^run (\d+)", done.stdout, re.MULTILINE)
    if run_id is None:
        raise RuntimeError(f"seed {seed}: no run id in the output (see {log_path})")
    rid = run_id.group(1)
    front = json.loads(_check(_cli("frontier", "--archive", archive, "--run", rid, "--json")))
    pick = next((m["id"] for m in front["members"] if m.get("picked")), None)
    if pick is None:
        raise RuntimeError(f"seed {seed}: run {rid} has no pick")
    val = json.loads(_check(_cli("validate", pick, "--archive", archive, "--run", rid,
                                 "--no-plots", "--json", *(["--data", opts.data]
                                                          if opts.data else []))))
    val.update(seed=seed, run=int(rid), search_s=round(time.monotonic() - t0, 1),
               settings=stamp)
    res_path.write_text(json.dumps(val, indent=1, sort_keys=True))
    return dict(val)


def _search(opts: StudyOptions, seed: int, archive: str, ray_address: str,
            log: Any) -> subprocess.CompletedProcess:
    """One seed's ``evolve run``: an earlier attempt of it continued, else a new run (an
    archive of its own that cannot be resumed kept as ``.old``); output in ``log``."""
    from evolve.text.untrusted import mask_secrets  # the log names the archive: no password

    done = None
    earlier = _earlier_run(archive, seed, finished=not opts.archive) \
        if opts.archive or Path(archive).exists() else None
    if earlier is not None:  # an earlier attempt of this seed: continue it
        log.write(f"--- seed {seed}: resuming run {earlier} of {mask_secrets(archive)}\n")
        log.flush()
        done = _CHILDREN.run(_cli(*run_argv(opts, seed, archive, ray_address, earlier)),
                             stdout=subprocess.PIPE, stderr=log, text=True)
        if done.returncode == 2 and not opts.archive:  # e.g. made with other settings
            log.write(f"--- seed {seed}: cannot resume (above); kept as {archive}.old, "
                      "starting again\n")
            os.replace(archive, f"{archive}.old")
            done = None
        elif done.returncode == 2:  # a shared archive: that run stays, a new one starts
            log.write(f"--- seed {seed}: cannot resume run {earlier} (above); starting a "
                      "new run\n")
            done = None
    elif not opts.archive and Path(archive).exists():  # no run in it: a new one
        os.replace(archive, f"{archive}.old")
    if done is None:
        done = _CHILDREN.run(_cli(*run_argv(opts, seed, archive, ray_address)),
                             stdout=subprocess.PIPE, stderr=log, text=True)
    log.write(done.stdout)
    return done


def _earlier_run(archive: str, seed: int, finished: bool) -> int | None:
    """The latest run of ``seed`` in ``archive``, which a study run again continues; None if
    there is none. In one archive every seed writes (``--archive``), only an unfinished
    run: a finished one belongs to an earlier study (``finished`` False), whose results
    live in its own ``--out``; a seed's own file holds this study's run alone."""
    try:
        runs = json.loads(_check(_cli("runs", "--archive", archive, "--json")))
    except (RuntimeError, ValueError):
        return None  # no archive there yet (or not one): a new run
    mine = [int(r["id"]) for r in runs if int(r.get("seed", -1)) == seed
            and (finished or r.get("status") != "finished")]
    return max(mine) if mine else None


def _check(cmd: list[str]) -> str:
    done = _CHILDREN.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:5])}: {done.stderr.strip()[-500:]}")
    return done.stdout


def summary(results: dict[int, dict[str, Any]]) -> tuple[list[SummaryRow], dict[str, Any]]:
    """The README's seed-study table (median [min, max] APE in % over the seeds, and the
    median simulated failures / measured) as rows, and its data for ``summary.json``."""
    import numpy as np

    first = next(iter(results.values()))["runs"]
    rows: list[SummaryRow] = []
    data: dict[str, Any] = {}
    for n in sorted(first):
        per_seed = [r["runs"][n] for r in results.values() if n in r["runs"]]
        data[n], ape = {}, {}
        for key, _label in METRICS:
            vals = [m["ape"].get(key) for m in per_seed]
            data[n][key] = vals
            v = np.array([100.0 * x if x is not None else np.inf for x in vals])
            ape[key] = (np.median(v), v.min(), v.max())
        failed = np.median([m.get("pred", {}).get("failures", 0) for m in per_seed])
        rows.append(SummaryRow(n, str(first[n].get("split", "")), ape, failed,
                               first[n].get("meas", {}).get("failures", 0)))
    return rows, data


def run_seeds(opts: StudyOptions, out: Path, ray_address: str, stamp: str, parallel: int,
              say: Say, warn: Say) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Every seed, ``parallel`` at a time; a stop signal reaches the running seeds and
    cancels the queued ones (see :class:`_Stopping`)."""
    from evolve.search.stopping import StopRequested, stop_signals

    global _CHILDREN
    _CHILDREN = _Stopping()
    results: dict[int, dict[str, Any]] = {}
    failed: list[str] = []
    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        with stop_signals():
            futures = {seed: pool.submit(run_seed, opts, seed, out, ray_address, stamp, say)
                       for seed in opts.seeds}
            try:
                for seed, fut in futures.items():
                    try:
                        results[seed] = fut.result()
                    except RuntimeError as exc:
                        failed.append(str(exc))
                        say(f"seed {seed}: FAILED: {exc}")
                        continue
                    r = results[seed]
                    say(f"seed {seed}: run {r.get('run', '?')}, picked {r['program'][:12]} "
                        + ("(earlier)" if r.get("reused") else f"({r['search_s']:.0f} s)"))
            except StopRequested as stop:
                warn(f"study: stopped by {stop.name}; stopping the running seeds")
                _CHILDREN.stop(stop.signum)
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results, failed
