"""``--llm local`` for real: llama-cpp-python's server with SmolLM2-135M on 127.0.0.1.

Why real: constrained decoding, the wrapper that keeps llama.cpp from crashing on AMX CPUs,
start/stop/restart of the child process and the prompt's token count are properties of the
real server and model, which scripts/setup.sh installs (so this never skips in CI).
Budget: about three minutes on 2 cores, most of it the short run at the end.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from llm_server import make_parent

from evolve.operators.llm.local.server import LocalServer, default_gguf
from evolve.operators.llm.prompting import COMPACT_TOKEN_CAP, build_prompt

ROOT = Path(__file__).resolve().parents[4]
SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=4096) as s:
        yield s


def tokens(server: LocalServer, text: str) -> int:
    root = server.base_url.removesuffix("/v1")
    req = urllib.request.Request(root + "/extras/tokenize",
                                 data=json.dumps({"input": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return len(json.load(r)["tokens"])


def prompt_tokens(server: LocalServer, profile: str) -> int:
    """Tokens of the largest prompt the seeds make: the longest seed as parent, the next
    longest as inspiration (chat-template tokens add ~10)."""
    seeds = sorted(ROOT.glob("seeds/*.py"), key=lambda p: -len(p.read_text()))
    parent, other = (make_parent(p.read_text()) for p in seeds[:2])
    prompt = build_prompt("mutate", [parent], [other], 12000, profile=profile)
    return sum(tokens(server, m["content"]) for m in prompt.messages)


def test_default_model_is_found():
    assert default_gguf().suffix == ".gguf" and default_gguf().stat().st_size > 10_000_000


def test_compact_prompt_is_under_1500_tokens_of_the_model(server):
    compact, full = prompt_tokens(server, "compact"), prompt_tokens(server, "full")
    print(f"prompt tokens (SmolLM2 tokenizer): compact {compact}, full {full}")
    assert compact < COMPACT_TOKEN_CAP < full


def test_llm_check_sees_the_grammar_honoured(server):
    out = subprocess.run([sys.executable, "-m", "evolve.cli.main", "llm-check", "--llm", "local",
                          "--llm-base-url", server.base_url, "--constrain", "gbnf", "--json",
                          "--timeout", "60"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["constrain_honoured"] is True, result


def test_a_dead_server_is_restarted_on_its_port(server):
    port, pid = server.port, server.proc.pid
    os.killpg(pid, 9)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(server.base_url + "/models", timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    assert server.port == port and server.proc.pid != pid and server.restarts == 1


def test_the_server_is_stopped_on_error():
    with pytest.raises(RuntimeError), LocalServer() as s:
        pid = s.proc.pid
        raise RuntimeError("boom")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.real_data
def test_a_short_local_run_fits_an_llm_program(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f"""
[run]
seed = 3
generations = 1
head_seconds = 12.0
workers = 1
progress = false
scenarios = {json.dumps(SCENARIOS)}

[search]
children = 3

[llm]
timeout_s = 300.0  # 2 shared cores under a parallel test load: generous, never retried

[fit]
max_evals = 30
restarts = 0
window_steps = 300
seed_polish_evals = 4
polish_evals = 4
""")
    archive = tmp_path / "a.db"
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "evolve.cli.main", "run", "--config", str(config),
                          "--llm", "local", "--archive", str(archive)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(out.stdout, out.stderr[-2000:], f"{time.monotonic() - t0:.0f} s")
    assert out.returncode == 0, out.stderr[-2000:]
    db = sqlite3.connect(archive)
    calls = db.execute("select status, error from llm_calls").fetchall()
    # kind 'child' = parsed, checked and fitted (it may still fail the physics checks or be
    # worse than its parent: that is the search's verdict, not the operator's)
    fitted = db.execute("select e.program_id, e.loss from evaluations e join programs p on "
                        "p.id = e.program_id and p.run_id = e.run_id where e.kind = 'child' "
                        "and e.loss is not null and e.loss < 1e300 "
                        "and p.operator like 'llm:term%'").fetchall()  # the local default form
    assert calls and fitted, (calls, db.execute("select kind, operator, reason from "
                                                "evaluations").fetchall())


def test_llama_threads_leave_the_fitting_workers_their_cpus():
    """llama.cpp gets the CPUs the workers leave, never fewer than one thread."""
    from evolve.operators.llm.local.server import llama_threads

    assert llama_threads(2, cpus=2) == 1  # the 2-core machine: fits keep both cores
    assert llama_threads(2, cpus=8) == 6
    assert llama_threads(1, cpus=4) == 3
    assert llama_threads(16, cpus=8) == 1  # force_workers beyond the CPUs
