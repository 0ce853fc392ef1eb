"""Round trip on data the tests make themselves (no bundled runs needed).

Runs simulated by evolve's own simulator from a known program at known constants, written
as TraceV2 and ingested (``tests/support/synthetic_data.py``): ``evolve fit`` must recover the
constants within 2 %, every command must work on the ingested directory end to end, and
export-trace followed by ingest must give back the same scenario.
"""

from __future__ import annotations

import json

import numpy as np
from synthetic_data import TRUTH, TRUTH_PROGRAM

from evaluator.api import Evaluator, load_scenarios
from evolve.cli.main import main
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

TINY_RUN = """
[run]
seed = 3
generations = 2
workers = 1
progress = false
[search]
children = 3
[fit]
scope = "global"
max_evals = 40
restarts = 0
window_steps = 300
polish_evals = 10
seed_polish_evals = 5
"""


def test_fit_recovers_the_constants(synthetic_data, tmp_path, capsys, monkeypatch):
    # the means' fit: the steady-percentile terms of the loss (issue 58), on these 60 s
    # synthetic slices a few dozen requests each, move decode_us by 3.5 % (measured)
    import evaluator.scoring.score as score

    for key in score.STEADY_KEYS:
        monkeypatch.setitem(score.DEFAULT_LOSS_WEIGHTS, key, 0.0)
    prog = tmp_path / "truth.py"
    prog.write_text(TRUTH_PROGRAM)  # starts from its own initial values, not the truth
    assert main(["fit", str(prog), "--data", str(synthetic_data), "--polish-evals", "400",
                 "--closed-loop", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    got = out["fit"]["groups"]["global"]
    err = {k: got[k] / TRUTH[k] - 1 for k in TRUTH}
    print("recovery error:", {k: f"{100 * v:+.2f}%" for k, v in err.items()})
    assert max(abs(v) for v in err.values()) < 0.02, err
    held_out = [r for r in out["runs"] if r["split"] == "validate"]
    assert held_out and held_out[0]["ape"]["e2e_mean"] < 0.01  # closed loop, held out


def test_commands_run_end_to_end_on_ingested_data(synthetic_data, tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_RUN)
    archive = tmp_path / "a.db"
    assert main(["run", "--config", str(cfg), "--data", str(synthetic_data), "--archive",
                 str(archive)]) == 0
    out = capsys.readouterr().out
    pick = out.split(" pick ")[-1].split()[0]
    assert main(["validate", pick, "--archive", str(archive), "--data", str(synthetic_data),
                 "--no-plots", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert set(runs) == {"synth-chat", "synth-generate", "synth-mixed", "synth-summarise"}
    assert all(r["valid"] for r in runs.values())
    go = tmp_path / "m.go"
    assert main(["export-go", pick, "--archive", str(archive), "--data", str(synthetic_data),
                 "-o", str(go)]) == 0
    assert "func New" in go.read_text()
    assert main(["data", "--data", str(synthetic_data)]) == 0
    assert "synth-generate" in capsys.readouterr().out


def test_export_trace_then_ingest_gives_the_same_run(synthetic_data, tmp_path, capsys):
    prefix = tmp_path / "chat"
    assert main(["export-trace", "chat", "--data", str(synthetic_data), "--out",
                 str(prefix), "--blis", "/opt/blis", "--blis-dir", "/opt/blis-src"]) == 0
    cmd = capsys.readouterr().out
    for flag in ("--trace-header", "--model-config-folder", "--total-kv-blocks 4000",
                 "--max-num-seqs 64", "--hardware H100", "--horizon",
                 "--defaults-filepath /opt/blis-src/defaults.yaml"):
        assert flag in cmd, flag
    out = tmp_path / "again"
    model = synthetic_data / "experiments" / "synth-chat" / "model"
    assert main(["ingest", f"{prefix}.yaml", "--out", str(out), "--name", "chat",
                 "--model", str(model), "--hardware", "H100", "--kv-blocks", "4000",
                 "--max-num-batched-tokens", "2048", "--stages", "4x45,10x45"]) == 0
    (a,) = load_scenarios(synthetic_data, ["synth-chat"])
    (b,) = load_scenarios(out)
    for field in ("arrival_us", "input_tokens", "output_tokens", "prefix_group"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (a.server, a.stages, a.system_prompt_len) == (b.server, b.stages, b.system_prompt_len)
    np.testing.assert_allclose(a.measured.e2e_s, b.measured.e2e_s, atol=1e-6)
    program = parse_program(TRUTH_PROGRAM)
    model_fn, c = step_model(program), program.init_vector()
    ma = Evaluator([a]).simulate(model_fn, {a.name: c})[a.name].metrics
    mb = Evaluator([b]).simulate(model_fn, {b.name: c})[b.name].metrics
    assert ma.pred == mb.pred
    for k, v in ma.ape.items():
        assert abs(v - mb.ape[k]) < 1e-4, k
