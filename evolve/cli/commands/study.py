"""``evolve study``: independent runs of one configuration, seeds in parallel, and the
median [min, max] closed-loop errors of each run's picked program over the seeds.

Why a command: a result is never one lucky run, so the README's table is the spread over
five seeds; run one after another that is five times the wall time of one search. Here
each seed is an island (its own population, no migration) run as its own ``evolve run``
process: with ``--executor local`` up to ``--parallel`` seeds at a time, each with
``--workers`` processes; with ``--executor ray`` every seed's driver joins one Ray cluster
(``--ray-address``, or an instance started here with every core), so the children of all
seeds share its CPUs while each driver keeps its operator (and LLM calls) and its archive.
Then each pick is validated closed loop on every measured run (``evolve validate``).

Each seed writes ``OUT/seed-S.db`` (or one run in ``--archive``, e.g. a PostgreSQL URL
that every seed writes to at once), ``OUT/seed-S.log`` and ``OUT/seed-S.json`` (its pick's
validation); a seed whose JSON exists is not run again, and a seed whose archive holds a
run of it is resumed (``evolve run --resume RUN``), so an interrupted study resumes: Ctrl-C
or SIGTERM stops the seeds' searches at a safe point (each prints how far it got), starts no
new seed, and the same command continues.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.workflows.targets import check_flags, not_blank, output_dir, output_file

HELP = "independent runs (seeds in parallel) and the median [min, max] of their picks"
METRICS = (("e2e_mean", "mean E2E"), ("ttft_mean", "mean TTFT"), ("itl_mean", "decode"),
           ("e2e_p99", "p99 E2E"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 1, 2, 3, 4], metavar="S")
    parser.add_argument("--generations", type=int, metavar="N",
                        help="generations per seed (default: the configuration's)")
    parser.add_argument("--config", metavar="F", help="TOML configuration of every seed")
    parser.add_argument("--out", default="runs/study", metavar="DIR",
                        help="per-seed archives, logs, validations and summary.json")
    parser.add_argument("--archive", metavar="URL",
                        help="one archive for every seed (e.g. postgresql://...); "
                        "default: OUT/seed-S.db each")
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="--executor ray: join this cluster (default: start one here)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="local executor: fitting processes per seed")
    parser.add_argument("--parallel", type=int, metavar="P",
                        help="seeds at a time (default: local, cores / workers; ray, all)")
    parser.add_argument("--data", metavar="DIR", help="data directory")
    parser.add_argument("--head-seconds", type=float, metavar="S",
                        help="cut every measured run to its first S seconds (quick demos)")


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


def _run_argv(args: argparse.Namespace, seed: int, archive: str, ray_address: str,
              resume: int | None = None) -> list[str]:
    """The ``evolve run`` command line of one seed (``resume``: continuing that run, whose
    stored configuration stands for ``--config``; the rest must repeat it)."""
    cmd = ["run", "--seed", str(seed), "--archive", archive, "--no-progress",
           "--executor", args.executor]
    cmd += (["--resume", str(resume)] if resume is not None
            else ["--config", args.config] if args.config else [])
    cmd += ["--generations", str(args.generations)] if args.generations is not None else []
    cmd += ["--data", args.data] if args.data else []
    cmd += (["--head-seconds", str(args.head_seconds)] if args.head_seconds is not None
            else [])  # 0 (whole runs) too: it overrides a config's cut
    cmd += ["--ray-address", ray_address] if ray_address else ["--workers", str(args.workers)]
    return cmd


def _check_settings(args: argparse.Namespace, out: Path) -> str:
    """Let ``evolve run --print-config`` judge the settings every seed will get, so a bad
    one is one line now, not a failed subprocess per seed later; also the data directory
    and the archive's address, which it does not open. Returns the settings' stamp (a hash
    of the configuration without the seed and the speed knobs)."""
    import hashlib
    import tomllib

    from evaluator.api import data_dir
    from evolve.config.schema import NOT_STORED

    argv = _run_argv(args, args.seeds[0], str(out / "settings-check.db"), "")
    done = subprocess.run(_cli(*argv, "--print-config"), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raise UserError(lines[-1].removeprefix("evolve run: error: "))
    data_dir(args.data)
    if args.archive:
        from evolve.archive.engines import locate

        try:
            loc = locate(args.archive)
            loc.url.get_dialect()
        except Exception as exc:  # SQLAlchemy's plugin and URL errors vary
            raise UserError(f"--archive {args.archive}: {exc}") from None
        path = loc.file
        if path is not None and (path.is_dir() or (path.exists() and path.stat().st_size)):
            from evolve.archive.store import Archive

            with Archive(args.archive, create=False):  # a text file, a directory, another
                pass  # schema: one line now, not every seed's run failing in its log
        elif path is not None and not path.exists():
            output_file(path, "--archive")
    cfg = tomllib.loads(done.stdout)
    for key in (*NOT_STORED, "seed"):
        cfg.get("run", {}).pop(key, None)
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def _reusable(args: argparse.Namespace, out: Path, stamp: str) -> None:
    """A seed finished by an earlier study is reused only if made with these settings."""
    for seed in args.seeds:
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


def _run_seed(args: argparse.Namespace, seed: int, out: Path, ray_address: str,
              stamp: str = "") -> dict[str, Any]:
    """Search, then validate the pick, in subprocesses; returns the validation."""
    from evolve.text.untrusted import mask_secrets  # the log names the archive: no password

    res_path, log_path = out / f"seed-{seed}.json", out / f"seed-{seed}.log"
    if res_path.exists():  # done by an earlier study (with these settings: _reusable)
        return dict(json.loads(res_path.read_text()), reused=True)
    print(f"seed {seed}: started (progress in {log_path})", flush=True)
    archive = args.archive or str(out / f"seed-{seed}.db")
    cmd = _run_argv(args, seed, archive, ray_address)
    t0 = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        done = None
        earlier = _earlier_run(archive, seed, finished=not args.archive) \
            if args.archive or Path(archive).exists() else None
        if earlier is not None:  # an earlier attempt of this seed: continue it
            log.write(f"--- seed {seed}: resuming run {earlier} of {mask_secrets(archive)}\n")
            log.flush()
            done = _CHILDREN.run(_cli(*_run_argv(args, seed, archive, ray_address, earlier)),
                                 stdout=subprocess.PIPE, stderr=log, text=True)
            if done.returncode == 2 and not args.archive:  # e.g. made with other settings
                log.write(f"--- seed {seed}: cannot resume (above); kept as {archive}.old, "
                          "starting again\n")
                os.replace(archive, f"{archive}.old")
                done = None
            elif done.returncode == 2:  # a shared archive: that run stays, a new one starts
                log.write(f"--- seed {seed}: cannot resume run {earlier} (above); starting a "
                          "new run\n")
                done = None
        elif not args.archive and Path(archive).exists():  # no run in it: a new one
            os.replace(archive, f"{archive}.old")
        if done is None:
            done = _CHILDREN.run(_cli(*cmd), stdout=subprocess.PIPE, stderr=log, text=True)
        log.write(done.stdout)
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
                                 "--no-plots", "--json", *(["--data", args.data]
                                                          if args.data else []))))
    val.update(seed=seed, run=int(rid), search_s=round(time.monotonic() - t0, 1),
               settings=stamp)
    res_path.write_text(json.dumps(val, indent=1, sort_keys=True))
    return dict(val)


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


def _short(name: str) -> str:
    """``20260217-155451-llama-2-7b-tp1-codegen`` -> ``llama-2-7b-tp1-codegen``."""
    return re.sub(r"^\d{8}-\d{6}-", "", name)


def summary_table(results: dict[int, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The README's seed-study table (median [min, max] APE in % over the seeds, and the
    median simulated failures / measured) and its data."""
    import numpy as np

    first = next(iter(results.values()))["runs"]
    lines = ["| run | split | " + " | ".join(label for _k, label in METRICS) + " | failed |",
             "|---|---|" + "---|" * (len(METRICS) + 1)]
    data: dict[str, Any] = {}
    for n in sorted(first):
        per_seed = [r["runs"][n] for r in results.values() if n in r["runs"]]
        cells, data[n] = [_short(n), str(first[n].get("split", ""))], {}
        for key, _label in METRICS:
            vals = [m["ape"].get(key) for m in per_seed]
            data[n][key] = vals
            v = np.array([100.0 * x if x is not None else np.inf for x in vals])
            cells.append(f"{np.median(v):.1f} [{v.min():.1f}, {v.max():.1f}]")
        failed = np.median([m.get("pred", {}).get("failures", 0) for m in per_seed])
        cells.append(f"{failed:.0f}/{first[n].get('meas', {}).get('failures', 0):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), data


def _run_seeds(args: argparse.Namespace, out: Path, ray_address: str, stamp: str,
               parallel: int) -> tuple[dict[int, dict[str, Any]], list[str]]:
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
            futures = {seed: pool.submit(_run_seed, args, seed, out, ray_address, stamp)
                       for seed in args.seeds}
            try:
                for seed, fut in futures.items():
                    try:
                        results[seed] = fut.result()
                    except RuntimeError as exc:
                        failed.append(str(exc))
                        print(f"seed {seed}: FAILED: {exc}", flush=True)
                        continue
                    r = results[seed]
                    print(f"seed {seed}: run {r.get('run', '?')}, picked "
                          f"{r['program'][:12]} " + ("(earlier)" if r.get("reused")
                                                     else f"({r['search_s']:.0f} s)"),
                          flush=True)
            except StopRequested as stop:
                print(f"study: stopped by {stop.name}; stopping the running seeds",
                      file=sys.stderr, flush=True)
                _CHILDREN.stop(stop.signum)
                pool.shutdown(wait=True, cancel_futures=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results, failed


def run(args: argparse.Namespace) -> int:
    if len(set(args.seeds)) != len(args.seeds):
        raise UserError("--seeds: each seed once")
    from evolve.config.schema import SEED_LIMIT

    bad = [s for s in args.seeds if not 0 <= s < SEED_LIMIT]  # only the first is run as a check
    if bad:
        raise UserError(f"--seeds {bad[0]}: out of range, each seed must be an integer in "
                        "[0, 2^63) (run.seed)")
    check_flags(args, at_least={"workers": 1, **({} if args.parallel is None
                                                  else {"parallel": 1})})
    if args.ray_address and args.executor != "ray":
        raise UserError("--ray-address: applies to --executor ray (the seeds would run as "
                        "local processes); pass --executor ray or drop the address")
    not_blank(args.out, "--out", "the study's directory")
    out = output_dir(args.out, "--out")
    stamp = _check_settings(args, out)
    _reusable(args, out, stamp)
    ray_address = ""
    if args.executor == "ray":
        from evolve.search.execution.ray_tasks import connect

        ray_address = connect(args.ray_address or "", os.cpu_count() or 1)
        parallel = args.parallel or len(args.seeds)
        where = args.ray_address or f"a Ray instance started here ({ray_address})"
    else:
        parallel = args.parallel or max(1, (os.cpu_count() or 1) // args.workers)
        where = f"local processes, {args.workers} per seed"
    print(f"study: seeds {' '.join(map(str, args.seeds))} ({parallel} in parallel), on "
          f"{where}; output in {out}", flush=True)
    results, failed = _run_seeds(args, out, ray_address, stamp, parallel)
    if _CHILDREN.signum is not None:
        name = signal.Signals(_CHILDREN.signum).name
        print(f"evolve study: stopped by {name}; finished seeds are kept in {out} and the "
              "others resume where they stopped: run the same command again", file=sys.stderr)
        return 128 + _CHILDREN.signum
    if results:
        text, data = summary_table(results)
        print(f"\nmedian [min, max] APE (%) of the picks over seeds "
              f"{', '.join(map(str, results))}, closed loop:\n{text}")
        (out / "summary.json").write_text(json.dumps(
            {"seeds": list(results), "picks": {s: r["program"] for s, r in results.items()},
             "ape": data}, indent=1, sort_keys=True))
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed or not results else 0
