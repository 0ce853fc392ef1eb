"""End to end: ``evolve run --llm`` against a local server records a cassette; the same run
with ``--replay`` and no server produces an identical archive.

The two runs are separate processes (the real CLI), so nothing is shared but the cassette.
"Identical" means every table row except what is *meant* to differ: the run's creation time,
code version and its configuration's endpoint/cassette fields, and in ``llm_calls`` the
billing fields (``cached``, ``cost_usd``: a replayed call is free).
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import LLMServer, Reply, Responder, fenced, parent_source, program_for
from needs import missing

from evaluator.data.scenarios import DataError, data_dir
from evolve.archive import Archive
from evolve.archive.digest import archive_digest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",          # train
             "20260218-141024-mixtral-8x7b-v0-1-tp2-roleplay",  # train
             "20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning",  # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]        # test
GENERATIONS = 5

CONFIG = """
[run]
seed = 3
head_seconds = 12.0
workers = 1
progress = false
scenarios = {scenarios}
seeds_dir = "{seeds}"

[search]
children = {children}
inspirations = 2

[operator]
{operator}

[fit]
max_evals = 30
window_steps = 300

[llm]
api_key_env = "EVOLVE_TEST_NO_SUCH_KEY"
timeout_s = 10.0
retries = 1
backoff_base_s = 0.05
backoff_cap_s = 0.1
concurrency = 3
crossover_prob = 0.3
prices = {{ "test-model" = [1.0, 4.0] }}
"""


LLM_ALONE = "llm_share = 1.0\noverlap = false"  # every child from the LLM, one at a time
MIXED = "llm_share = 0.5\noverlap = true\nrepairs = 2"


def responder(request: dict, n: int) -> Reply:
    """Replies by request seed: mostly fresh programs, some diffs, some junk."""
    seed = int(request.get("seed") or 0)
    if seed % 7 == 0:
        return Reply(content="Let me think about the KV cache first.")
    if seed % 7 == 1:
        last = [ln for ln in parent_source(request).rstrip().splitlines() if ln.strip()][-1]
        return Reply(content=f"<<<<<<< SEARCH\n{last}\n=======\n{last} + 0.5 * f.batch_size\n"
                             ">>>>>>> REPLACE\n")
    return Reply(content=fenced(program_for(seed)))


def evolve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Through main() as the console script does (``python -m evolve.cli.main`` would load the
    # CLI module twice, as __main__ and as evolve.cli.main, with two distinct UserError classes).
    main = "import sys; from evolve.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", main, "run", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=170)


def dump(db: Path) -> dict[str, list[tuple]]:
    """Every compared table as sorted rows, minus the columns that legitimately differ."""
    skip = {"runs": {"config", "code_version", "created_at", "finished_at"},
            "llm_calls": {"cached", "cost_usd"}, "final_scores": {"created_at"}}
    out: dict[str, list[tuple]] = {}
    with sqlite3.connect(db) as con:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for table in tables:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            keep = [c for c in cols if c not in skip.get(table, set())]
            rows = con.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall()
            out[table] = sorted(rows, key=repr)
    return out


def _run_config(tmp_path: Path, children: int, operator: str) -> Path:
    """The run's TOML, with two seed programs of its own (a short generation 0)."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for name in ("roofline.py", "linear.py"):
        shutil.copy(ROOT / "seeds" / name, seeds / name)
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.format(scenarios=str(SCENARIOS).replace("'", '"'), seeds=seeds,
                                 children=children, operator=operator))
    return cfg


def _assert_same_archive(rec: Path, rep: Path) -> None:
    """Every compared table equal, and the project's own digest (scripts/archive_digest.py)
    agrees."""
    a, b = dump(rec), dump(rep)
    assert a.keys() == b.keys()
    for table in a:
        assert a[table] == b[table], f"table {table} differs between record and replay"
    with Archive(rec, create=False) as ra, Archive(rep, create=False) as rb:
        assert archive_digest(ra) == archive_digest(rb)


def _record_and_replay(tmp_path: Path, data: Path, reply: Responder, operator: str,
                       children: int, generations: int, *flags: str) -> list[dict]:
    """Record a run against the test server answering with ``reply``, replay its cassette
    with nothing listening, and check both archives are the same; returns the requests the
    server saw."""
    cfg = _run_config(tmp_path, children=children, operator=operator)
    cassette = tmp_path / "run.cassette.jsonl"
    common = ["--config", str(cfg), "--data", str(data), "--generations", str(generations),
              "--llm", "test-model", *flags, "--cassette", str(cassette)]
    with LLMServer(reply, lifetime_s=300) as server:
        rec = evolve(*common, "--archive", str(tmp_path / "rec.db"), "--llm-base-url",
                     server.base_url, "--record", cwd=tmp_path)
        requests = list(server.requests)
    assert rec.returncode == 0, rec.stderr[-3000:]
    rep = evolve(*common, "--archive", str(tmp_path / "rep.db"), "--llm-base-url",
                 "http://127.0.0.1:9/v1", "--replay", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]
    _assert_same_archive(tmp_path / "rec.db", tmp_path / "rep.db")
    return requests


@pytest.fixture(scope="module")
def data() -> Path:
    try:
        return data_dir(os.environ.get("EVOLVE_DATA") or ROOT.parent / "shared" / "data")
    except DataError as exc:
        missing(f"no measured data to replay a run on ({exc})", "EVOLVE_SKIP_REAL_DATA",
                "set EVOLVE_DATA")


@pytest.mark.real_data
def test_record_then_replay_gives_identical_archive(tmp_path: Path, data: Path):
    cfg = _run_config(tmp_path, children=2, operator=LLM_ALONE)
    cassette = tmp_path / "llm.cassette.jsonl"
    common = ["--config", str(cfg), "--data", str(data), "--generations", str(GENERATIONS),
              "--llm", "test-model", "--cassette", str(cassette)]

    with LLMServer(responder, lifetime_s=180) as server:
        rec = evolve(*common, "--archive", str(tmp_path / "rec.db"), "--llm-base-url",
                     server.base_url, "--record", cwd=tmp_path)
        n_requests = len(server.requests)
    assert rec.returncode == 0, rec.stderr[-3000:]
    assert n_requests == GENERATIONS * 2
    assert len(cassette.read_text().splitlines()) == n_requests
    # The held-out runs never reached the endpoint.
    sent = "\n".join(m["content"] for r in server.requests for m in r["messages"])
    assert SCENARIOS[0] in sent and SCENARIOS[2] not in sent and SCENARIOS[3] not in sent

    rep = evolve(*common, "--archive", str(tmp_path / "rep.db"), "--llm-base-url",
                 "http://127.0.0.1:9/v1", "--replay", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]

    _assert_same_archive(tmp_path / "rec.db", tmp_path / "rep.db")
    with sqlite3.connect(tmp_path / "rec.db") as con:
        accepted = con.execute("SELECT count(*) FROM evaluations WHERE operator LIKE 'llm:%' "
                               "AND status = 'accepted'").fetchone()[0]
        statuses = {r[0] for r in con.execute("SELECT status FROM llm_calls")}
    assert accepted >= 2 and "ok" in statuses and statuses <= {"ok", "no_program"}
    with sqlite3.connect(tmp_path / "rep.db") as con:
        cached = con.execute(
            "SELECT count(*), sum(cached), sum(cost_usd) FROM llm_calls").fetchone()
    assert cached[0] == n_requests and cached[1] == n_requests and cached[2] == 0.0

    # Replaying a different seed asks for requests the cassette does not hold: a clear stop.
    miss = evolve(*common, "--archive", str(tmp_path / "miss.db"), "--llm-base-url",
                  "http://127.0.0.1:9/v1", "--replay", "--seed", "4", "--generations", "1",
                  cwd=tmp_path)
    assert miss.returncode == 2 and "Traceback" not in miss.stderr, miss.stderr[-2000:]
    assert re.search(rf"cassette {re.escape(str(cassette))}: no recorded exchange for request "
                     r"[0-9a-f]{64}", miss.stderr), miss.stderr[-2000:]


@pytest.mark.real_data
@pytest.mark.slow
def test_mixed_run_with_overlap_and_repair_replays_identically(tmp_path: Path, data: Path):
    """Issue 59: half the children from the LLM, the next generation's requests sent while
    the current one fits, repairs of rejected LLM children: recorded and replayed, the same
    archive."""
    requests = _record_and_replay(tmp_path, data, responder, MIXED, 4, 4)
    n_requests = len(requests)
    with sqlite3.connect(tmp_path / "rec.db") as con:
        ops = [r[0] for r in con.execute(
            "SELECT operator FROM evaluations WHERE generation > 0 AND kind IN "
            "('child', 'screen')")]
        calls = con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]
    assert any(o.startswith("llm:") for o in ops) and any(o.startswith("offline:") for o in ops)
    # every request sent was used (the last generation sends nothing ahead)
    assert calls == n_requests == sum(o.startswith("llm:") for o in ops)


def term_responder(request: dict, n: int) -> Reply:
    """Term replies (the local model's default form), by request seed: some vanish at 0,
    some do not, some are junk."""
    seed = int(request.get("seed") or 0)
    if seed % 5 == 0:
        return Reply(content="Add the KV cache reads.")
    feature = ("kv_read", "kv_sum", "batch_size", "prefill_tokens")[seed % 4]
    body = (f"c.k0 * f.{feature}" if seed % 3 else f"f.{feature} / c.k0 + c.k1")
    return Reply(content=fenced('CONSTANTS = {"k0": (1.5, 0.0, 10.0), "k1": (2.0, 0.0, '
                                f'10.0)}}\n\ndef term(f, c):\n    return {body}\n'))


@pytest.mark.slow
def test_a_term_form_mixed_run_replays_identically(tmp_path: Path, data: Path):
    """Issue 59: constrained decoding makes the replies terms added to their parents; with
    mixing, overlap and repair on, recorded and replayed, the same archive."""
    requests = _record_and_replay(tmp_path, data, term_responder, MIXED, 4, 3,
                                     "--constrain", "gbnf")
    grammars = {"def term(f, c)" in r.get("grammar", "") for r in requests}
    assert grammars == {True}  # every request carried the term grammar
    with sqlite3.connect(tmp_path / "rec.db") as con:
        fitted = con.execute("SELECT count(*) FROM evaluations WHERE kind = 'child' AND "
                             "operator LIKE 'llm:term%' AND loss IS NOT NULL").fetchone()[0]
    assert fitted > 0
