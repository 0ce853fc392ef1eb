"""Tiny searches for the scale-out tests (three measured runs cut to 20 s, three children,
small fitting budgets: the one of tests/integration/test_loop.py, seconds per run, every table
populated), and how to compare one run's rows across archives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evolve.archive import Archive
from evolve.config.schema import Config, apply_dict, validate
from evolve.search.loop import RunSummary, Search

SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test
TINY: dict[str, dict[str, Any]] = {
    "run": {"generations": 3, "head_seconds": 20.0, "scenarios": SCENARIOS, "workers": 1,
            "progress": False},
    "search": {"children": 3, "refresh_min_gap": 1, "refresh_margin": 0.02},
    "fit": {"max_evals": 40, "restarts": 0, "window_steps": 300}}


def tiny_config(archive: str | Path, seed: int, **run: Any) -> Config:
    cfg = Config()
    apply_dict(cfg, TINY, "test")
    apply_dict(cfg, {"run": {"seed": seed, **run}}, "test")
    cfg.run.archive = str(archive)
    return validate(cfg, "test")


def tiny_toml(path: Path) -> Path:
    """The tiny configuration as a TOML file, for ``evolve run --config``."""
    lines = []
    for section, values in TINY.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_tiny(archive: str | Path, seed: int, **run: Any) -> tuple[RunSummary, dict[str, Any]]:
    cfg = tiny_config(archive, seed, **run)
    with Archive(cfg.run.archive) as ar:
        summary = Search(cfg, ar, log=lambda _m: None).run()
        return summary, ar.comparable()


def run_rows(tables: dict[str, list[dict[str, Any]]], run_id: int) -> dict[str, list[Any]]:
    """One run's rows of every table, without the run id (runs compare across archives)."""
    out: dict[str, list[Any]] = {}
    for name, rows in tables.items():
        if name == "schema_version":
            continue
        key = "id" if name == "runs" else "run_id"
        out[name] = [{k: v for k, v in r.items() if k != key} for r in rows
                     if r.get(key) == run_id]
    return out


def wait_for_generation(db: Path, generation: int, proc: Any, timeout_s: float = 300) -> None:
    """Poll a run's SQLite archive (read-only) until a run has committed ``generation``,
    the process ``proc`` ended, or ``timeout_s`` passed: the moment to send it a stop."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
                done = con.execute("SELECT max(generations_done) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:
            done = None
        if done is not None and done >= generation:
            return
        time.sleep(0.1)
