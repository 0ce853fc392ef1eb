"""Ingesting the bundled runs through each source gives back the scenarios evolve loads.

* a TraceV2 pair written by ``scripts/bundled_to_tracev2.py`` (standard library only, laid
  out as ``blis observe`` records: rows in completion order, wall-clock send times,
  suffix-only prompts, timed-out requests without output counts) must score the same
  closed loop as the bundled run, within 0.5 % (here: identical);
* the bundled experiment directory read as an inference-perf directory must give the
  loader's arrays exactly;
* ``evolve export-trace`` followed by ``evolve ingest`` must too, failures included.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluator.api import Evaluator, load_scenarios
from evolve.cli.main import main
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

pytestmark = pytest.mark.real_data
ROOT = Path(__file__).resolve().parents[3]
REASONING = "20260217-170634-llama-2-7b-tp1-reasoning"
CODEGEN = "20260217-155451-llama-2-7b-tp1-codegen"
FIELDS = ("arrival_us", "input_tokens", "output_tokens")


def _flags(data_path, *extra):
    return ["--model", str(data_path / "models" / "Llama-2-7b-hf"), "--hardware", "H100",
            "--kv-blocks", "7462", "--max-num-batched-tokens", "2048", "--tp", "1",
            "--max-num-seqs", "128", "--block-size", "16", "--model-short", "llama-2-7b",
            *extra]


def _scores(sc):
    program = parse_program((ROOT / "seeds" / "trained_physics.py").read_text())
    res = Evaluator([sc]).simulate(step_model(program), {sc.name: program.init_vector()})
    return res[sc.name].metrics


@pytest.mark.parametrize(("run", "head", "stages", "split"), [
    (REASONING, None, "4x1200", "test"), (CODEGEN, 240.0, "5x240", "train")])
def test_third_party_trace_scores_like_the_bundled_run(data_path, tmp_path, run, head,
                                                       stages, split):
    prefix = tmp_path / "observed"
    cmd = [sys.executable, str(ROOT / "scripts" / "bundled_to_tracev2.py"),
           str(data_path / "experiments" / run), "--out", str(prefix)]
    subprocess.run(cmd + (["--head", str(head)] if head else []), check=True,
                   capture_output=True)
    out = tmp_path / "data"
    assert main(["ingest", f"{prefix}.yaml", "--out", str(out), "--split", split,
                 *_flags(data_path, "--stages", stages)]) == 0
    (mine,) = load_scenarios(out)
    (ref,) = load_scenarios(data_path, [run])
    ref = ref.head(head) if head else ref
    assert mine.name == run  # named from the header's created_at, model, TP and workload
    a, b = _scores(ref), _scores(mine)
    print(f"{run}: bundled {a.pred['e2e_mean']:.4f} s / ingested {b.pred['e2e_mean']:.4f} s "
          f"mean E2E; APE {a.ape['e2e_mean']:.4f} / {b.ape['e2e_mean']:.4f}")
    for key in ("e2e_mean", "ttft_mean", "e2e_p99", "itl_mean", "failures"):
        assert b.pred[key] == pytest.approx(a.pred[key], rel=0.005), key
        assert b.ape[key] == pytest.approx(a.ape[key], rel=0.005, abs=1e-4), key


def test_bundled_directory_as_inference_perf_source(data_path, tmp_path):
    out = tmp_path / "data"
    assert main(["ingest", str(data_path / "experiments" / CODEGEN), "--out", str(out),
                 "--model", str(data_path / "models" / "Llama-2-7b-hf"),
                 "--hardware", "H100"]) == 0
    (bare,) = load_scenarios(out)
    assert bare.kernels.tolist() == [0.0] * 5  # no kernel tables there: roofline fallback
    (out / "kernels").symlink_to((data_path / "kernels").resolve())  # the user adds tables
    (mine,) = load_scenarios(out)
    (ref,) = load_scenarios(data_path, [CODEGEN])
    for field in (*FIELDS, "prefix_group"):
        np.testing.assert_array_equal(getattr(mine, field), getattr(ref, field), field)
    assert (mine.server, mine.stages, mine.split, mine.model, mine.workload) == (
        ref.server, ref.stages, ref.split, ref.model, ref.workload)
    assert mine.measured.summary == ref.measured.summary
    np.testing.assert_array_equal(mine.arch_vector, ref.arch_vector)


def test_bundled_directory_with_a_bad_row_is_refused_as_the_loader_refuses_it(
        data_path, tmp_path, capsys):
    src = tmp_path / "run"
    shutil.copytree(data_path / "experiments" / CODEGEN, src)
    path = src / "requests.json"
    doc = json.loads(path.read_text())
    doc["requests"][17]["input_tokens"] = "591"
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    code = main(["ingest", str(src), "--out", str(tmp_path / "data"),
                 "--model", str(data_path / "models" / "Llama-2-7b-hf"), "--hardware", "H100"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert f"{path}: field 'requests[17].input_tokens' missing or invalid ('591')" in err
    assert not (tmp_path / "data" / "experiments").exists()


def _first_seen(ids):
    """Ids renumbered in order of first occurrence: equal arrays = the same partition."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


def test_export_trace_then_ingest_keeps_failures(data_path, tmp_path, capsys):
    prefix = tmp_path / "r"
    assert main(["export-trace", "llama-2-7b-tp1-reasoning", "--out", str(prefix)]) == 0
    capsys.readouterr()
    out = tmp_path / "data"
    assert main(["ingest", f"{prefix}.yaml", "--out", str(out), *_flags(data_path)]) == 0
    (mine,) = load_scenarios(out)
    (ref,) = load_scenarios(data_path, [REASONING])
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(mine, field), getattr(ref, field), field)
    # the repeated prompts come back as one group each (ids in order of first arrival)
    np.testing.assert_array_equal(_first_seen(mine.prompt_id), _first_seen(ref.prompt_id))
    assert mine.measured.failed.sum() == ref.measured.failed.sum() == 4068
    assert set(mine.meta["status"]) == {"ok", "timeout"}
    ok = ~ref.measured.failed
    np.testing.assert_allclose(mine.measured.e2e_s[ok], ref.measured.e2e_s[ok], atol=1e-6)
