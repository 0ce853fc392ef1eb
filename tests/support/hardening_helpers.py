"""The tiny search the hardening tests interrupt, lock and damage: three measured runs cut
to 20 s, three children per generation, small fitting budgets (seconds per run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from evolve.archive import Archive
from evolve.archive.digest import archive_digest
from evolve.config.schema import Config, apply_dict, validate
from evolve.search.loop import Search

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test


def config_dict(generations: int = 3, workers: int = 2) -> dict[str, dict[str, Any]]:
    return {"run": {"seed": 7, "generations": generations, "head_seconds": 20.0,
                    "scenarios": SCENARIOS, "workers": workers, "progress": False},
            "search": {"children": 3, "refresh_min_gap": 1, "refresh_margin": 0.02},
            "fit": {"max_evals": 40, "restarts": 0, "window_steps": 300,
                    "seed_polish_evals": 8, "polish_evals": 8}}


def tiny_toml(path: Path, **kw: Any) -> Path:
    lines = []
    for section, values in config_dict(**kw).items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def baseline_digest(archive: Path, toml: Path) -> str:
    """Run the configuration of ``toml`` uninterrupted, in process; its archive digest."""
    import tomllib

    cfg = Config()
    apply_dict(cfg, tomllib.loads(toml.read_text()), "test")
    cfg.run.archive = str(archive)
    validate(cfg, "test")
    with Archive(archive) as ar:
        Search(cfg, ar, log=lambda _m: None).run()
        return archive_digest(ar)


def digest(archive: Path) -> str:
    with Archive(archive, create=False) as ar:
        return archive_digest(ar)


def evolve(*args: str, **kw: Any) -> subprocess.Popen[str]:
    """``evolve ARGS`` as a child process (its own process group: signals go to it only)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "evolve.cli.main", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def table_count(archive: Path, table: str) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{archive}?mode=ro", uri=True, timeout=10)
    try:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        con.close()
