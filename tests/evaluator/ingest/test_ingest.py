"""``evolve ingest`` and ``evolve data`` on hand-made sources: what is kept, what is refused.

Every refusal is one line naming the file (and row and field where there is one), exit
code 2, and nothing written: the data directory does not even appear.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from trace_helpers import columns, edit_csv, model_dir, perf_dir, write

from evaluator.api import load_scenarios
from evolve.cli.main import main

FLAGS = ["--hardware", "H100", "--kv-blocks", "3000", "--max-num-batched-tokens", "2048",
         "--tp", "1", "--max-num-seqs", "64", "--block-size", "16"]


def ingest(tmp_path, header, *extra, out=None):
    out = out or tmp_path / "data"
    return main(["ingest", str(header), "--out", str(out), "--model",
                 str(model_dir(tmp_path)), *FLAGS, *extra]), out


def test_trace_is_ingested_with_failures_kept(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    code, out = ingest(tmp_path, h, "--split", "validate")
    assert code == 0
    printed = capsys.readouterr().out
    assert "12 requests (2 failed)" in printed and "note:" in printed
    (sc,) = load_scenarios(out)
    assert sc.name == "20260301-102030-tiny-llama-1b-tp1-chatbot"
    assert sc.split == "validate" and sc.workload == "chatbot" and sc.model == "tiny-llama-1b"
    assert sc.meta["status"][3] == "timeout" and sc.meta["status"][7] == "error"
    assert sc.measured.failed.tolist() == [i in (3, 7) for i in range(12)]
    np.testing.assert_array_equal(sc.arrival_us, np.arange(12) * 250_000.0)
    np.testing.assert_array_equal(sc.input_tokens, 232 + 10 * np.arange(12))
    assert sc.output_tokens.tolist() == [64] * 12  # failed ones get the completed median
    assert sc.system_prompt_len == 32 and sc.n_prefix_groups == 3
    np.testing.assert_allclose(sc.measured.ttft_s[0], 0.020)
    np.testing.assert_allclose(sc.measured.e2e_s[11], 0.900 + 0.110)
    assert main(["data", "--data", str(out), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["experiments"]
    assert listing[0]["failed_by_status"] == {"error": 1, "timeout": 1}
    assert listing[0]["requests"] == 12 and listing[0]["gpu"] == "H100 SXM"
    assert main(["data", "--data", str(out)]) == 0
    table = capsys.readouterr().out
    assert "2 (error 1, timeout 1)" in table and "ingested" in table


def test_rows_in_completion_order_are_sorted_by_send_time(tmp_path):
    header, cols = columns()
    perm = np.random.default_rng(1).permutation(12)
    cols = {k: np.asarray(v)[perm] for k, v in cols.items()}
    h, _ = write(tmp_path / "t", header, cols)
    code, out = ingest(tmp_path, h)
    assert code == 0
    (sc,) = load_scenarios(out)
    np.testing.assert_array_equal(sc.arrival_us, np.arange(12) * 250_000.0)
    assert sc.prefix_group.tolist() == [i % 3 for i in range(12)]


def _refused(tmp_path, capsys, argv_or_header, *extra, needle):
    code, out = ingest(tmp_path, argv_or_header, *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "\n" not in err, err
    assert not out.exists(), "a refused ingest must write nothing"
    return err


@pytest.mark.parametrize(("row", "col", "value", "needle"), [
    (2, "input_tokens", "-1", "row 3 (line 4), field 'input_tokens': negative value -1"),
    (0, "arrival_time_us", "x", "row 1 (line 2), field 'arrival_time_us': not an integer"),
    (5, "last_chunk_time_us", "2", "row 6 (line 7), field 'last_chunk_time_us'"),
    (None, "prefix_length", None, "field 'prefix_length': missing column"),
])
def test_bad_trace_is_one_line_and_writes_nothing(tmp_path, capsys, row, col, value, needle):
    h, d = write(tmp_path / "t")
    edit_csv(d, row, col, value)
    err = _refused(tmp_path, capsys, h, needle=needle)
    assert str(d) in err


@pytest.mark.parametrize(("extra", "needle"), [
    ({"kv_lora_rank": 512}, "field 'kv_lora_rank': multi-head latent attention"),
    ({"quantization_config": {"bits": 4}}, "field 'quantization_config'"),
    ({"head_dim": 256}, "field 'head_dim'"),
    ({"sliding_window": 1024}, "field 'sliding_window'"),
    ({"num_hidden_layers": "22"}, "num_hidden_layers"),
])
def test_unknown_model_field_is_refused(tmp_path, capsys, extra, needle):
    h, _ = write(tmp_path / "t")
    model_dir(tmp_path, **extra)
    code = main(["ingest", str(h), "--out", str(tmp_path / "data"), "--model",
                 str(tmp_path / "model" / "config.json"), *FLAGS])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "config.json" in err and "\n" not in err, err
    assert not (tmp_path / "data").exists()


def test_settings_missing_or_contradicting_the_header(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    code = main(["ingest", str(h), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), "--hardware", "H100", "--tp", "1",
                 "--max-num-seqs", "64", "--block-size", "16", "--max-num-batched-tokens", "2048"])
    assert code == 2 and "--kv-blocks: required" in capsys.readouterr().err
    doc = yaml.safe_load(h.read_text())
    doc["server"]["tensor_parallel"] = 2
    h.write_text(yaml.safe_dump(doc))
    _refused(tmp_path, capsys, h, needle="field 'server.tensor_parallel': 2 disagrees with --tp 1")
    _refused(tmp_path, capsys, h, "--hardware", "B300",
             needle="no shipped GPU of that name")


@pytest.mark.parametrize("flag", ["--name", "--stages", "--workload", "--model-short"])
def test_an_empty_flag_is_refused_not_defaulted(tmp_path, capsys, flag):
    h, _ = write(tmp_path / "t")
    _refused(tmp_path, capsys, h, flag, "", needle=f"{flag}: empty")


def test_a_kv_pool_that_cannot_hold_one_request_is_refused(tmp_path, capsys):
    """As vLLM refuses to start (it once ingested, and `evolve run` crashed on it)."""
    h, _ = write(tmp_path / "t")
    _refused(tmp_path, capsys, h, "--kv-blocks", "5",
             needle="--kv-blocks: 5 KV blocks x 16 tokens hold 80 tokens, fewer than "
                    "max_model_len")
    _refused(tmp_path, capsys, h, "--kv-blocks", str(10**20),
             needle=f"--kv-blocks: {10**20} is out of range")  # once an internal error


def test_prefix_groups_mixed_with_ungrouped_requests(tmp_path, capsys):
    header, cols = columns()
    cols["prefix_group"][4] = ""
    h, _ = write(tmp_path / "t", header, cols)
    _refused(tmp_path, capsys, h, needle="row 5 (line 6), field 'prefix_group'")
    code, out = ingest(tmp_path, h, "--ignore-prefix-groups")
    assert code == 0
    (sc,) = load_scenarios(out)
    assert sc.n_prefix_groups == 0 and sc.input_tokens[4] == 272  # no group: server count
    assert sc.input_tokens[5] == 282  # grouped: prefix + suffix, as BLIS replays it


def test_existing_experiment_is_kept_unless_replace(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    assert ingest(tmp_path, h, "--name", "mine")[0] == 0
    out = tmp_path / "data"
    before = (out / "experiments" / "mine" / "requests.json").read_bytes()
    code, _ = ingest(tmp_path, h, "--name", "mine", "--split", "test")
    assert code == 2 and "exists" in capsys.readouterr().err
    assert (out / "experiments" / "mine" / "requests.json").read_bytes() == before
    assert ingest(tmp_path, h, "--name", "mine", "--split", "test", "--replace")[0] == 0
    assert load_scenarios(out)[0].split == "test"
    assert sorted(p.name for p in (out / "experiments").iterdir()) == ["mine"]


def test_inference_perf_directory(tmp_path, capsys):
    d = perf_dir(tmp_path)
    code = main(["ingest", str(d), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), "--hardware", "a100"])
    assert code == 0, capsys.readouterr().err
    (sc,) = load_scenarios(tmp_path / "data")
    assert sc.name == "perf-run" and sc.hardware.name == "A100 SXM 80GB"
    assert sc.server.kv_blocks == 3456 and sc.server.block_size == 16
    assert sc.output_tokens.tolist() == [80] * 16  # the profile's, not the client's 37
    assert sc.prefix_group.tolist() == [i % 4 for i in range(16)]
    assert sc.system_prompt_len == 48 and sc.stages[0].rate == 2
    np.testing.assert_allclose(sc.arrival_us, np.arange(16) * 0.5e6)
    assert sc.meta["status"][6] == "timeout" and sc.input_tokens[6] == 348  # median filled
    np.testing.assert_allclose(sc.measured.ttft_s[~sc.measured.failed], 0.03, rtol=1e-9)
    np.testing.assert_allclose(sc.measured.e2e_s[0], 0.5, rtol=1e-9)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda r: r["info"].__setitem__("output_token_times", [9.0, 8.0]),
     "row 3, field 'output_token_times'"),
    (lambda r: r.__setitem__("info", "oops"), "row 3, field 'info': not a mapping (str)"),
    (lambda r: r["info"].__setitem__("response_metrics", "x"),
     "row 3, field 'info', field 'response_metrics': not a mapping (str)"),
])
def test_inference_perf_bad_record(tmp_path, capsys, edit, needle):
    d = perf_dir(tmp_path)
    path = d / "results" / "per_request_lifecycle_metrics.json"
    rows = json.loads(path.read_text())
    edit(rows[2])
    path.write_text(json.dumps(rows))
    code = main(["ingest", str(d), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), "--hardware", "H100"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and str(path) in err, err
    assert not (tmp_path / "data").exists()


def _ingested(tmp_path, d, capsys):
    """Ingest the inference-perf directory ``d`` (must succeed): (what it said, scenario)."""
    code = main(["ingest", str(d), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), "--hardware", "H100"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (sc,) = load_scenarios(tmp_path / "data")
    return out.out + out.err, sc


def test_inference_perf_summary_of_other_requests_is_not_used(tmp_path, capsys):
    """A summary that counts other requests than the records (a cut of a run) would pass
    its aggregates off as these rows' measured figures."""
    d = perf_dir(tmp_path)
    (d / "results" / "summary_lifecycle_metrics.json").write_text(json.dumps({
        "successes": {"count": 9000, "latency": {k: {"mean": 2.0, "median": 2.0, "p90": 2.0,
                                                     "p99": 2.0} for k in (
            "request_latency", "time_to_first_token")}},
        "failures": {"count": 0}}))
    said, sc = _ingested(tmp_path, d, capsys)
    assert "counts 9000 requests, the per-request records 16: not used" in said
    assert sc.measured.summary["e2e_mean"] == pytest.approx(0.5)  # the records', not 2.0


def test_inference_perf_records_without_token_times_are_noted(tmp_path, capsys):
    """A completed record without output_token_times has no TTFT: said, and the measured
    TTFT is the timed records' alone."""
    d = perf_dir(tmp_path)
    path = d / "results" / "per_request_lifecycle_metrics.json"
    rows = json.loads(path.read_text())
    for r in rows[:3]:  # three completed records (the failed one is row 16 - 6 = 9)
        r["info"]["output_token_times"] = []
    path.write_text(json.dumps(rows))
    said, sc = _ingested(tmp_path, d, capsys)
    assert "3 of 15 completed records have no output_token_times" in said
    assert int(np.sum(~sc.measured.failed & np.isnan(sc.measured.ttft_s))) == 3
    assert sc.measured.summary["ttft_mean"] == pytest.approx(0.03)


@pytest.mark.parametrize(("file", "edit", "needle"), [
    ("exp-config.yaml", lambda d: d.__setitem__("max_num_seqs", "many"),
     "field 'max_num_seqs': must be a positive integer, got 'many'"),
    ("exp-config.yaml", lambda d: d.__setitem__("tensor_parallelism", 0),
     "field 'tensor_parallelism': must be a positive integer, got 0"),
    ("profile.yaml", lambda d: d["load"]["stages"][0].__setitem__("rate", "fast"),
     "load.stages[0], field 'rate': 'fast' is not a finite number"),
    ("profile.yaml", lambda d: d["load"]["stages"][0].pop("duration"),
     "load.stages[0], field 'duration': missing"),
    ("profile.yaml", lambda d: d["load"].__setitem__("stages", "5x600"),
     "field 'load.stages': not a list of stages"),
    ("profile.yaml", lambda d: d.__setitem__("data", [1]), "field 'data': not a mapping"),
    ("vllm.log", None, "'# GPU blocks: 0': no KV cache"),
    ("profile.yaml", lambda d: d["data"].__setitem__("shared_prefix", "abc"),
     "data, field 'shared_prefix': not a mapping"),
    ("profile.yaml", lambda d: d["data"]["shared_prefix"].__setitem__("output_len", -5),
     "data.shared_prefix, field 'output_len': must be a positive integer, got -5"),
    ("profile.yaml", lambda d: d["data"]["shared_prefix"].__setitem__("system_prompt_len",
                                                                      -100),
     "data.shared_prefix, field 'system_prompt_len': must be a non-negative integer"),
    ("profile.yaml", lambda d: d["data"]["shared_prefix"].__setitem__(
        "num_unique_system_prompts", "x"), "field 'num_unique_system_prompts': must be a"),
])
def test_inference_perf_bad_settings_name_file_and_field(tmp_path, capsys, file, edit, needle):
    """Settings the run records are used, so a bad one is an error, never skipped."""
    d = perf_dir(tmp_path)
    if edit is None:  # the vLLM log: plain text
        (d / file).write_text("INFO ... # GPU blocks: 0, # CPU blocks: 0\n")
    else:
        doc = yaml.safe_load((d / file).read_text())
        edit(doc)
        (d / file).write_text(yaml.safe_dump(doc))
    code = main(["ingest", str(d), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), "--hardware", "H100"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and str(d / file) in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "data").exists()


def test_export_trace_of_a_slice_keeps_statuses(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    code, out = ingest(tmp_path, h, "--name", "mine")
    assert code == 0
    prefix = tmp_path / "slice"
    assert main(["export-trace", "mine", "--data", str(out), "--from", "0.6", "--to", "2.1",
                 "--out", str(prefix)]) == 0
    from evaluator.ingest.tracev2 import read_tracev2

    t = read_tracev2(f"{prefix}.yaml", f"{prefix}.csv")
    assert t.columns["status"].tolist() == ["timeout", "ok", "ok", "ok", "error", "ok"]
    assert t.columns["arrival_time_us"].tolist() == [150_000 + 250_000 * i for i in range(6)]
    assert (t.columns["deadline_us"] - t.columns["arrival_time_us"] == 300_000_000).all()
    assert t.columns["prefix_length"].tolist() == [32] * 6
    assert "--total-kv-blocks 3000" in capsys.readouterr().out
    # --from past the last arrival, without --to: says so, and does not blame --to
    assert main(["export-trace", "mine", "--data", str(out), "--from", "5000",
                 "--out", str(prefix)]) == 2
    err = capsys.readouterr().err
    assert "--from 5000: the last request of mine arrives at" in err and "--to" not in err
    for extra, needle in ((["--from", "-5"], "finite seconds from 0 on"),
                          (["--to", "inf"], "finite seconds from 0 on")):
        assert main(["export-trace", "mine", "--data", str(out), *extra, "--out",
                     str(prefix)]) == 2
        assert needle in capsys.readouterr().err
    assert main(["export-trace", "mine", "--data", str(out), "--out",
                 str(tmp_path / "tr") + "/"]) == 2
    assert "a file prefix is needed" in capsys.readouterr().err
    # a missing parent directory is created, as report and validate create theirs
    assert main(["export-trace", "mine", "--data", str(out), "--out",
                 str(tmp_path / "new" / "dir" / "t")]) == 0
    assert (tmp_path / "new" / "dir" / "t.csv").is_file()
