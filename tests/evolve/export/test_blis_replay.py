"""Real BLIS replays an exported run with an exported program and agrees with ``evolve validate``.

The whole path of docs/blis.md, as a BLIS user takes it: ``evolve export-go`` a program,
build the ``blis`` binary from BLIS's source at the pinned commit with all three
documented edits (``scripts/build_blis.py``, GOPATH mode on Debian's Go libraries, nothing
downloaded), ``evolve export-trace`` a 60-second slice of a bundled run, ``blis replay``
it with the printed command, and compare with ``evolve validate`` on the same slice
(ingested back) simulated in evolve's replica of BLIS's engine loop (``--loop blis``: no
async scheduling, TTFT + ``output_token_us``, BLIS's preemption and clock). Mean E2E must
agree within 0.5 %, mean TTFT within 1 %. (The export keeps the constants as given:
``--fitted-loop blis``; test_export_loop.py covers the refit.)

Needs BLIS's source (``require_blis``: ``$EVOLVE_BLIS_GIT``, ``../shared/blis/*.tar.gz`` or
the cache clone), Go, Debian's golang-*-dev packages
(``scripts/build_blis.py`` names them) and the bundled runs; otherwise it fails and says
which is missing (``EVOLVE_SKIP_BLIS=1`` / ``EVOLVE_SKIP_GO=1`` skip it on purpose).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from blis_run import build_blis, replay

from evolve.cli.main import main

RUN, START, END = "llama-2-7b-tp1-general", 600, 660  # the 20 rps stage: real batching
PROGRAM = '''"""Champion shape: a KV-write or per-request bound step plus a fixed cost per step."""

CONSTANTS = {
    "s1": (1.0, 0.01, 100.0),
    "per_req_us": (50.0, 0.0, 1000.0),
    "per_step_us": (5000.0, 10.0, 50000.0),
    "queue_us": (10000.0, 0.0, 100000.0),
    "post_decode_us": (500.0, 0.0, 50000.0),
    "output_token_us": (20.0, 0.0, 2000.0),
}


def step_time(f, c):
    return c.s1 * maximum(f.kv_write, c.per_req_us * f.batch_size) + c.per_step_us


def queueing_time(r, c):
    return c.queue_us
'''
CONSTS = {"llama-2-7b": {"s1": 0.77, "per_req_us": 111.0, "per_step_us": 6950.0,
                         "queue_us": 15350.0, "post_decode_us": 200.0,
                         "output_token_us": 80.7}}  # teacher-forced fit, 7B runs' first 300 s


@pytest.mark.real_data
def test_blis_replay_agrees_with_evolve_validate(tmp_path, data_path, capsys):
    prog, consts = tmp_path / "champion.py", tmp_path / "consts.json"
    prog.write_text(PROGRAM)
    consts.write_text(json.dumps(CONSTS))
    go_file, blis = tmp_path / "evolved.go", tmp_path / "bin" / "blis"
    assert main(["export-go", str(prog), "--constants", str(consts), "--scope", "per_model",
                 "--fitted-loop", "blis", "--no-refit", "--data", str(data_path), "-o",
                 str(go_file)]) == 0
    build_blis(go_file, blis)
    prefix = tmp_path / "slice"
    res = replay(blis, RUN, data_path, prefix, capsys, "--from", str(START), "--to", str(END))

    data = tmp_path / "data"
    assert main(["ingest", f"{prefix}.yaml", "--out", str(data), "--name", "slice",
                 "--model", str(data_path / "models" / "Llama-2-7b-hf"), "--hardware", "H100",
                 "--kv-blocks", "7462", "--max-num-batched-tokens", "2048",
                 "--model-short", "llama-2-7b"]) == 0
    capsys.readouterr()
    assert main(["validate", str(prog), "--constants", str(consts), "--data", str(data),
                 "--json", "--no-plots", "--loop", "blis"]) == 0
    ours = json.loads(capsys.readouterr().out)["runs"]["slice"]
    assert ours["n_ok"] == len(res) > 1000  # every request completes in both
    e2e = np.mean([r["e2e_us"] for r in res]) / 1e6
    ttft = np.mean([r["ttft_us"] for r in res]) / 1e6
    d_e2e = e2e / ours["pred"]["e2e_mean"] - 1
    d_ttft = ttft / ours["pred"]["ttft_mean"] - 1
    print(f"BLIS vs evolve validate, {RUN} {START}-{END} s, {len(res)} requests: mean E2E "
          f"{e2e:.5f} vs {ours['pred']['e2e_mean']:.5f} s ({100 * d_e2e:+.3f} %), mean TTFT "
          f"{ttft:.5f} vs {ours['pred']['ttft_mean']:.5f} s ({100 * d_ttft:+.3f} %)")
    assert abs(d_e2e) < 0.005
    assert abs(d_ttft) < 0.01
