"""Loading real runs, and one-line errors naming the file and the field for bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from evaluator.api import load_scenarios
from evaluator.data.scenarios import DataError, data_dir


def test_all_runs_load_with_profile_output_lengths(all_scenarios):
    assert len(all_scenarios) == 16
    assert {s.model for s in all_scenarios} == {"llama-2-7b", "llama-2-70b", "mixtral-8x7b",
                                               "codellama-34b"}
    by = {s.workload: s for s in all_scenarios}
    assert set(np.unique(by["reasoning"].output_tokens)) == {1448}  # trap 4: profile length
    assert all(s.input_tokens.min() > 0 for s in all_scenarios)  # failed rows filled in
    split = {s.name: s.split for s in all_scenarios}
    assert sum(v == "test" for v in split.values()) == 3
    mixtral = next(s for s in all_scenarios if s.model == "mixtral-8x7b")
    assert mixtral.arch.is_moe and mixtral.arch.topk == 2
    assert mixtral.hardware.peak_flops == pytest.approx(989.5e12)  # trap 6: dense


def test_window_scores_only_after_warmup(all_scenarios):
    sc = all_scenarios[0]
    w = sc.window(300.0, 360.0, warmup_s=30.0)
    assert w.arrival_us.min() >= 0 and w.arrival_us.max() < 90e6
    assert w.scored is not None and 0 < w.scored.sum() < w.n_requests
    assert w.measured.summary["successes"] == w.scored.sum()


def _copy_run(data_path, tmp_path):
    src = next((data_path / "experiments").iterdir())
    root = tmp_path / "data"
    shutil.copytree(data_path / "models", root / "models")
    shutil.copytree(data_path / "hardware", root / "hardware")
    dst = root / "experiments" / src.name
    shutil.copytree(src, dst)
    return root, dst


def _rewrite(path, mutate) -> None:
    """Load the JSON file at ``path`` (the data's files are read-only), edit it, write it."""
    doc = json.loads(path.read_text())
    mutate(doc)
    path.chmod(0o644)
    path.write_text(json.dumps(doc))


def _load_error(root) -> str:
    """The one-line DataError that loading ``root`` must raise."""
    with pytest.raises(DataError) as err:
        load_scenarios(root)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


REQ, GT = "requests.json", "ground_truth.json"


@pytest.mark.parametrize(("file", "mutate", "needle"), [
    (REQ, lambda d: d["config"].pop("max_num_seqs"), "config.max_num_seqs"),
    (REQ, lambda d: d.__setitem__("split", "bogus"), "split"),
    (REQ, lambda d: d["requests"][3].pop("arrival_time_us"), "requests[3].arrival_time_us"),
    (REQ, lambda d: d["requests"][17].__setitem__("input_tokens", "591"),
     "requests[17].input_tokens' missing or invalid ('591')"),
    (REQ, lambda d: d["requests"][2].__setitem__("has_error", None), "requests[2].has_error"),
    (REQ, lambda d: d["requests"][9].__setitem__("input_tokens", 12.5),
     "requests[9].input_tokens' missing or invalid (12.5)"),
    (REQ, lambda d: d["config"].__setitem__("block_size", "16"), "config.block_size"),
    (REQ, lambda d: d["config"].__setitem__("tensor_parallelism", 0),
     "field 'config.tensor_parallelism' must be positive"),
    (REQ, lambda d: d["config"].__setitem__("tensor_parallelism", 3),
     "field 'config.tensor_parallelism': tensor-parallel size 3 does not divide the model's "
     "num_attention_heads (64); vLLM refuses to start"),
    (REQ, lambda d: d["config"].__setitem__("max_num_batched_tokens", 100),
     "field 'config.max_num_batched_tokens': max_num_batched_tokens 100 is below "
     "max_num_seqs"),
    (REQ, lambda d: d["config"].__setitem__("kv_blocks_total_gpu", 10**20),
     "field 'config.kv_blocks_total_gpu' is out of range"),
    (REQ, lambda d: d["config"].__setitem__("kv_blocks_total_gpu", 5),
     "field 'config.kv_blocks_total_gpu': 5 KV blocks x 16 tokens hold 80 tokens, fewer than "
     "max_model_len 4096"),
    (REQ, lambda d: d["requests"][5].__setitem__("arrival_time_us", -5), "arrival_time_us"),
    (GT, lambda rows: rows[3].__setitem__("e2e_s", "x"), "'[3].e2e_s' missing or invalid ('x')"),
    (GT, lambda rows: rows[2].__setitem__("e2e_s", -1.5), "'[2].e2e_s' missing or invalid (-1.5)"),
    (GT, lambda rows: rows[5].pop("e2e_s"), "'[5].e2e_s' missing on a completed request"),
    (GT, lambda rows: rows[7].__setitem__("ttft_s", 50.0), "'[7].ttft_s' 50 exceeds its e2e_s"),
    (GT, lambda rows: rows[4].__setitem__("index", 10**9), "'[4].index' names no request"),
    (GT, lambda rows: rows[6].pop("has_error"), "'[6].has_error' missing or invalid"),
])
def test_bad_run_file_names_file_row_and_field(data_path, tmp_path, file, mutate, needle):
    root, run = _copy_run(data_path, tmp_path)
    _rewrite(run / file, mutate)
    msg = _load_error(root)
    assert file in msg and needle in msg


@pytest.mark.parametrize("file", [REQ, GT])
def test_a_directory_where_a_run_file_should_be(data_path, tmp_path, file):
    """Said as such (it was an IsADirectoryError traceback)."""
    root, run = _copy_run(data_path, tmp_path)
    (run / file).unlink()
    (run / file).mkdir()
    assert _load_error(root) == f"{run / file}: cannot read (Is a directory)"


PROF = "profile.yaml"
SP = "data.shared_prefix"


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d["data"]["shared_prefix"].__setitem__("num_unique_system_prompts", "eleven"),
     f"field '{SP}.num_unique_system_prompts' has wrong type str"),
    (lambda d: d["data"]["shared_prefix"].__setitem__("num_unique_system_prompts", -2),
     f"field '{SP}.num_unique_system_prompts' must be positive"),
    (lambda d: d["data"]["shared_prefix"].__setitem__("output_len", 0),
     f"field '{SP}.output_len' must be positive"),
    (lambda d: d["data"]["shared_prefix"].__setitem__("output_len", 100_000),
     f"field '{SP}.output_len' 100000 leaves no room for a prompt within max_model_len"),
    (lambda d: d["data"]["shared_prefix"].__setitem__("system_prompt_len", -100),
     f"field '{SP}.system_prompt_len' must be >= 0"),
    (lambda d: d["data"]["shared_prefix"].__setitem__("question_len", "long"),
     f"field '{SP}.question_len' has wrong type str"),
    (lambda d: d["load"].__setitem__("stages", []), "field 'load.stages' is empty"),
    (lambda d: d["load"]["stages"][0].__setitem__("rate", -5),
     "field 'load.stages[0].rate' must be positive"),
    (lambda d: d["load"]["stages"][-1].__setitem__("duration", 0),
     "].duration' must be positive"),
    (lambda d: d["load"]["stages"].__setitem__(0, "fast"),
     "missing field 'load.stages[0].rate'"),
])
def test_bad_load_profile_names_file_and_field(data_path, tmp_path, mutate, needle):
    """The load profile decides what is replayed: a value the loader cannot use is an error
    naming the field (a string once crashed every command; an empty or negative load was
    accepted and simulated as nothing)."""
    root, run = _copy_run(data_path, tmp_path)
    _rewrite(run / PROF, mutate)
    msg = _load_error(root)
    assert PROF in msg and needle in msg, msg


@pytest.mark.parametrize(("kind", "mutate", "needle"), [
    ("models", lambda d: d.__setitem__("num_attention_heads", 33),
     "field 'num_attention_heads': hidden_size / heads / kv heads do not divide evenly"),
    ("models", lambda d: d.__setitem__("num_key_value_heads", 3), "do not divide evenly"),
    ("hardware", lambda d: d["compute"].__setitem__("with_sparsity", "yes"),
     "field 'compute.with_sparsity' has wrong type str"),
    ("hardware", lambda d: d["memory"].__setitem__("capacity_gb", -80),
     "field 'memory.capacity_gb' must be positive"),
])
def test_model_and_gpu_files_are_checked_as_ingest_checks_them(data_path, tmp_path, kind,
                                                                mutate, needle):
    root, _run = _copy_run(data_path, tmp_path)
    paths = sorted((root / kind).rglob("*.json"))
    for path in paths:
        _rewrite(path, mutate)
    msg = _load_error(root)
    assert needle in msg and any(str(p) in msg for p in paths), msg


def test_corrupt_json_and_missing_dir(data_path, tmp_path):
    root, run = _copy_run(data_path, tmp_path)
    (run / "ground_truth.json").chmod(0o644)
    (run / "ground_truth.json").write_text("{not json")
    with pytest.raises(DataError, match=r"ground_truth\.json: not valid JSON"):
        load_scenarios(root)
    with pytest.raises(DataError, match="data directory not found"):
        data_dir(tmp_path / "nowhere")


def test_a_folder_that_is_not_a_data_directory_is_named_as_such(tmp_path):
    """An existing folder without experiments/ (one level too deep, say) is not "not
    found": the message says what is missing from it."""
    (tmp_path / "models").mkdir()
    with pytest.raises(DataError, match=r"not a data directory \(no experiments/ inside\)"):
        data_dir(tmp_path)


@pytest.mark.parametrize(("kind", "dotted", "value"), [
    ("hardware", "memory.bandwidth_tb_s", 0), ("hardware", "memory.bandwidth_tb_s", -3.35),
    ("hardware", "interconnect.nvlink_bandwidth_gb_s", 0),
    ("hardware", "compute.bf16_tensor_core", 0),
    ("models", "num_hidden_layers", 0), ("models", "num_key_value_heads", 0),
])
def test_a_size_or_rate_that_divides_must_be_positive(data_path, tmp_path, kind, dotted,
                                                      value):
    """Zero once divided a component by zero (an internal error); a negative bandwidth was
    accepted and fitted."""
    root, _run = _copy_run(data_path, tmp_path)
    *parents, leaf = dotted.split(".")

    def set_value(doc):
        for part in parents:
            doc = doc[part]
        doc[leaf] = value

    for path in sorted((root / kind).rglob("*.json")):
        _rewrite(path, set_value)
    with pytest.raises(DataError) as err:
        load_scenarios(root)
    msg = str(err.value)
    assert f"field '{dotted}' must be positive (got {value})" in msg and ".json" in msg
