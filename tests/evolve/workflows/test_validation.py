"""evolve.workflows.validation: the decode interval by admission time, on known arrays and on the
overloaded validate run whose drift docs/selection.md and evaluator/sim/simulator.py describe."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evolve.cli.main import main
from evolve.workflows.validation import DRIFT_MIN_REQUESTS, decode_drift

MIXTRAL_REASONING = "20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning"


def _side(admit_s: np.ndarray, itl_ms: np.ndarray, out: int = 101) -> tuple[np.ndarray, ...]:
    """Completed requests with the given admission times and decode intervals."""
    arrival = admit_s - 5.0
    ttft = np.full(admit_s.shape, 5.0)
    e2e = ttft + itl_ms * 1e-3 * (out - 1)
    return arrival, ttft, e2e, np.full(admit_s.shape, out)


def test_decode_drift_windows_by_admission_time():
    n = DRIFT_MIN_REQUESTS
    admit = np.concatenate([np.linspace(1, 99, n), np.linspace(101, 199, n),
                            np.linspace(201, 220, n - 1)])  # the last window is short of n
    itl = np.concatenate([np.full(n, 30.0), np.full(n, 40.0), np.full(n - 1, 50.0)])
    flat = np.full(admit.shape, 31.0)
    rows = decode_drift(_side(admit, itl), _side(admit, flat), window_s=100.0)
    assert [(r["from_s"], r["to_s"]) for r in rows] == [(0, 100), (100, 200), (200, 300)]
    assert rows[0]["measured_ms"] == pytest.approx(30.0)
    assert rows[1]["measured_ms"] == pytest.approx(40.0)
    assert rows[2]["measured_ms"] is None and rows[2]["measured_n"] == n - 1
    assert [r["simulated_ms"] for r in rows[:2]] == [pytest.approx(31.0)] * 2
    # a side with no completed request reports nothing, the other side still does
    empty = tuple(np.zeros(0) for _ in range(4))
    rows = decode_drift(_side(admit, itl), empty, window_s=100.0)
    assert len(rows) == 3 and all(r["simulated_ms"] is None for r in rows)
    assert rows[0]["measured_ms"] == pytest.approx(30.0)


@pytest.mark.slow
def test_validate_reports_the_drift_of_the_overloaded_validate_run(capsys, data_path):
    code = main(["validate", "layered", "--data", str(data_path), "--split", "validate",
                 "--json", "--no-plots"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["admission_drift"]) == {MIXTRAL_REASONING}  # the only run that queues
    rows = [r for r in out["admission_drift"][MIXTRAL_REASONING]
            if r["measured_ms"] is not None]
    # measured: the batch is full throughout, yet the interval grows with the wait
    assert rows[-1]["measured_ms"] > 1.15 * rows[0]["measured_ms"]
    every = out["admission_drift"][MIXTRAL_REASONING]
    meas = out["runs"][MIXTRAL_REASONING]["meas"]
    assert sum(r["measured_n"] for r in every) == 4800 - meas["failures"]  # every completion
    assert any(r["simulated_ms"] is not None for r in out["admission_drift"][
        MIXTRAL_REASONING])
    # how steeply it prices long contexts, per model of the simulated runs: `layered`
    # prices context by the KV bytes at peak bandwidth, a little under the kernel
    assert set(out["context_price"]) == {"codellama-34b", "mixtral-8x7b"}
    assert all(0.8 < v < 1.0 for v in out["context_price"].values())
    # every simulated run answers to a 3 % step-time change; `layered` at its declared
    # constants runs Mixtral `reasoning` at its knee (no timeouts, amplified response)
    sens = out["sensitivity"]
    assert set(sens) == set(out["runs"])
    assert all(v["minus"] < 0.0 < v["plus"] for v in sens.values())
    assert sens[MIXTRAL_REASONING]["plus"] > 2 * 0.03
    assert all(abs(v["plus"]) < 2 * 0.03 for n, v in sens.items() if n != MIXTRAL_REASONING)
    # no training run validated here, so no envelope to measure the runs against
    assert out["envelope"] == {n: None for n in out["runs"]}


@pytest.mark.slow
def test_an_overloaded_run_answers_with_failures_not_mean_e2e(capsys, data_path):
    """BLIS's published coefficients overload Mixtral `reasoning`: the completed requests'
    mean E2E is capped by the client timeout and hardly moves with the step time, while
    the simulated timeouts do."""
    assert main(["validate", "trained_physics", "--data", str(data_path), "--split",
                 "validate", "--json", "--no-plots"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["sensitivity"][MIXTRAL_REASONING]
    failed = out["runs"][MIXTRAL_REASONING]["pred"]["failures"]
    assert failed > 100
    assert abs(s["minus"]) < 0.03 and abs(s["plus"]) < 0.03
    assert s["failed_minus"] < 0.9 * failed and s["failed_plus"] > 1.1 * failed


def test_sensitivity_line_names_only_the_runs_at_a_knee():
    from evolve.workflows.validation import Validation, sensitivity_lines

    val = Validation({}, {}, sensitivity={
        "20260217-231439-llama-2-7b-tp1-general": {"minus": -0.086, "plus": 0.102},
        "20260217-155451-llama-2-7b-tp1-codegen": {"minus": -0.042, "plus": 0.043}})
    (line,) = sensitivity_lines(val)
    assert line.endswith("llama-2-7b-tp1-general -8.6/+10.2 %")
    assert "codegen" not in line
    calm = Validation({}, {}, sensitivity={"a": {"minus": -0.03, "plus": 0.03}})
    assert sensitivity_lines(calm)[0].endswith(": none")
    assert sensitivity_lines(Validation({}, {})) == []


def test_envelope_is_the_reach_past_the_models_training_runs():
    """Batch size and longest context at the 99th percentile of a run's steps, over the
    largest of its model's training runs; a model without one gets None."""
    from types import SimpleNamespace

    from evaluator.api import STAT_INDEX
    from evolve.workflows.validation import Validation, envelope, envelope_lines

    def corpus(n_decode: float, kv_max: float, steps: int = 200):
        stats = np.zeros((len(STAT_INDEX), steps))
        stats[STAT_INDEX["n_decode"]] = n_decode
        stats[STAT_INDEX["n_prefill"], ::2] = 1.0  # a prefill every other step
        stats[STAT_INDEX["kv_max"]] = np.linspace(0.0, kv_max, steps)
        return SimpleNamespace(stats=stats)

    runs = {"a-train": ("m", "train", corpus(63, 800)), "b-train": ("m", "train",
                                                                   corpus(31, 1000)),
            "c-long": ("m", "test", corpus(127, 2500)), "d-other": ("x", "validate",
                                                                    corpus(10, 100))}
    ev = SimpleNamespace(by_name={n: SimpleNamespace(model=m, split=s)
                                  for n, (m, s, _c) in runs.items()})
    env = envelope(ev, {n: c for n, (_m, _s, c) in runs.items()})
    assert env["a-train"]["batch"] == pytest.approx(1.0)
    assert env["b-train"]["context"] == pytest.approx(1.0)
    assert env["c-long"]["batch"] == pytest.approx(2.0)
    assert env["c-long"]["context"] == pytest.approx(2.5, rel=0.01)
    assert env["d-other"] is None
    (line,) = envelope_lines(Validation({}, {}, envelope=env))
    assert "c-long (batch x2.0, context x2.5)" in line
    assert "d-other (no training run of its model validated)" in line
    assert "a-train" not in line and "b-train" not in line


@pytest.mark.slow
def test_validate_writes_the_four_plots(tmp_path, data_path, capsys):
    out = tmp_path / "val"
    assert main(["validate", "layered", "--data", str(data_path), "--split", "validate",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "runs at a knee" in text and "long-context price" in text
    assert "TTFT p99 steady meas" in text and "p99 TTFT steady" in text  # beside the means
    pngs = sorted(p.name for p in out.iterdir() if p.suffix == ".png")
    assert pngs == ["e2e_cdfs.png", "knees.png", "pred_vs_measured.png", "ttft_cdfs.png"]
    whose = json.loads((out / "plots.json").read_text())
    assert whose["label"] == "layered" and len(whose["program"]) == 64
    assert len(whose["constants"]) == 16  # the declared ones here: a digest of {}
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.slow
def test_plots_at_a_forced_scope_are_not_the_runs_own(tmp_path, data_path, capsys):
    """Found in review: `--scope global` on pooled constants simulated other constants per
    run, yet plots.json carried the run's digest and the report showed them unwarned."""
    from evolve.program.language import parse_program
    from evolve.report.validation import constants_digest
    from evolve.workflows.targets import SEEDS_DIR

    program = parse_program((SEEDS_DIR / "linear.py").read_bytes())
    init = {s.name: s.init for s in program.constants}
    groups = {"global": init, "mixtral-8x7b": {**init, "b0_us": 2 * init["b0_us"]}}
    consts = tmp_path / "c.json"
    consts.write_text(json.dumps(groups))
    digests = {}
    for scope in ([], ["--scope", "global"]):
        out = tmp_path / f"val{len(scope)}"
        assert main(["validate", str(SEEDS_DIR / "linear.py"), "--constants", str(consts),
                     "--data", str(data_path), "--split", "validate", "--out", str(out),
                     *scope]) == 0
        digests[len(scope)] = json.loads((out / "plots.json").read_text())["constants"]
    capsys.readouterr()
    assert digests[0] == constants_digest(groups) != digests[2]


def _metrics(workload: str, ape: float):
    from evaluator.api import RunMetrics

    keys = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p99", "ttft_p90", "ttft_p99",
            "ttft_p90_steady", "ttft_p99_steady", "e2e_p99_steady")
    return RunMetrics(f"x-{workload}", "train", "m", workload, pred=dict.fromkeys(keys, 1.0),
                      meas=dict.fromkeys(keys, 1.0), ape=dict.fromkeys(keys, ape))


def test_validate_prints_the_percentile_errors_beside_the_means():
    from evolve.workflows.validation import summary_lines, table_headers, table_rows

    heads = table_headers()
    for label in ("E2E", "TTFT", "TTFT p90", "TTFT p99", "E2E p99", "TTFT p90 steady",
                  "TTFT p99 steady", "E2E p99 steady"):
        assert f"{label} meas" in heads
    metrics = {"a": _metrics("general", 0.05), "b": _metrics("codegen", 0.2),
               "c": _metrics("reasoning", 0.0)}
    row = table_rows(metrics)[0]
    assert len(row) == len(heads)
    assert row[heads.index("TTFT p99 steady meas") + 2] == "5.0%"
    line = next(s for s in summary_lines(metrics) if "steady" in s)
    assert "of 2:" in line  # the normal runs only
    assert "p99 TTFT steady 1" in line and "p99 E2E all 1" in line


def test_validate_writes_a_ttft_cdf_per_run(tmp_path):
    from evolve.workflows.validation import Validation, plot

    rng = np.random.default_rng(0)
    ttft = {n: (rng.lognormal(-3, 0.3, 200), rng.lognormal(-3, 0.4, 200),
                np.arange(200) >= 30, np.arange(200) >= 30) for n in ("r1", "r2")}
    lat = {n: (rng.lognormal(1, 0.1, 200), rng.lognormal(1, 0.1, 200)) for n in ttft}
    val = Validation({n: _metrics("general", 0.0) for n in ttft}, lat, ttft=ttft)
    paths = plot(val, tmp_path, "t")
    assert tmp_path / "ttft_cdfs.png" in paths and (tmp_path / "ttft_cdfs.png").stat().st_size
