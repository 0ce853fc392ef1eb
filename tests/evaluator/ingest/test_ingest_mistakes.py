"""``evolve ingest`` given what a user gets wrong: each is one line naming the file (and row
and field), exit 2, nothing written; found by a fresh-eyes session using the command."""

from __future__ import annotations

import json
import os
import signal

import pytest
import yaml
from trace_helpers import edit_csv, model_dir, perf_dir, write

from evolve.cli.main import main

FLAGS = ["--hardware", "H100", "--kv-blocks", "3000", "--max-num-batched-tokens", "2048",
         "--tp", "1", "--max-num-seqs", "64", "--block-size", "16"]


def refused(tmp_path, capsys, source, *extra) -> str:
    """Ingest ``source``; assert the one-line refusal and that nothing was written."""
    out = tmp_path / "data"
    code = main(["ingest", str(source), "--out", str(out), "--model",
                 str(model_dir(tmp_path)), *FLAGS, *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


@pytest.mark.parametrize(("stages", "needle"), [
    ("5x0.000001", "of 12 requests arrive after that"),  # a slice with one request in it
    ("0x600", "stage 1 has rate 0, but 12 requests arrive in it"),
    ("1.2.3x600", "'1.2.3x600' is not RATExSECONDS"),
])
def test_stages_that_do_not_describe_the_trace(tmp_path, capsys, stages, needle):
    h, _ = write(tmp_path / "t")
    assert needle in refused(tmp_path, capsys, h, "--stages", stages)


def test_a_short_overrun_of_the_stages_is_noted_not_refused(tmp_path, capsys):
    h, _ = write(tmp_path / "t")  # 12 requests, one every 0.25 s: the last at 2.75 s
    code = main(["ingest", str(h), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), *FLAGS, "--stages", "4x2.6"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "1 request(s) arrive until 2.8 s (counted in the last stage)" in out.out + out.err


@pytest.mark.parametrize("kind", ["directory", "symlink loop"])
def test_a_data_file_that_cannot_be_read(tmp_path, capsys, kind):
    h, d = write(tmp_path / "t")
    d.unlink()
    if kind == "directory":
        d.mkdir()
    else:
        os.symlink(tmp_path / "loop2", d)
        os.symlink(d, tmp_path / "loop2")
    err = refused(tmp_path, capsys, h)
    assert f"{d}: cannot read" in err


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda h, d: d.write_bytes(b"\xef\xbb\xbf" + d.read_bytes()), "byte-order mark"),
    (lambda h, d: edit_csv(d, 2, "input_tokens", "\u0664\u0669\u0661"), "not an integer"),
    (lambda h, d: d.write_text(d.read_text().splitlines()[0] + ",extra\n"
                               + "\n".join(d.read_text().splitlines()[1:]) + "\n"),
     "columns, the header has"),
    (lambda h, d: h.write_text(h.read_text() + "mode: generated\n"),
     "key 'mode' given twice"),
    (lambda h, d: h.write_text(h.read_text() + "? [a, b]\n: 1\n"), "found unhashable key"),
    (lambda h, d: edit_csv(d, 1, "reason_ratio", "\u0660.\u0665"), "not a number"),
    (lambda h, d: h.write_text(h.read_text() + "network:\n  measured_rtt_ms: fast\n"),
     "field 'network.measured_rtt_ms' has invalid value 'fast'"),
    (lambda h, d: edit_csv(d, 4, "output_tokens", "99999999"),
     "row 5 (line 6), field 'output_tokens': 99999999 output tokens do not fit "
     "max_model_len 4096"),
    (lambda h, d: edit_csv(d, 2, "last_chunk_time_us", "999999999999999999"),
     "row 3 (line 4): an E2E latency of "),  # once stored as 31 years, swamping the mean E2E
])
def test_traces_a_strict_reader_refuses(tmp_path, capsys, edit, needle):
    """As BLIS's reader (Go's CSV and yaml.v3, ASCII digits), and the row of the file."""
    h, d = write(tmp_path / "t")
    edit(h, d)
    err = refused(tmp_path, capsys, h)
    assert needle in err and (str(h) in err or str(d) in err), err


def test_a_max_model_len_too_small_for_most_requests(tmp_path, capsys):
    """`--max-model-len 10` was reported as row 1's output length alone; that every
    request fails the same way points at the setting instead."""
    h, d = write(tmp_path / "t")
    err = refused(tmp_path, capsys, h, "--max-model-len", "10")
    n = len(d.read_text().splitlines()) - 1
    assert f"{d}: row " in err and f"do not fit max_model_len 10 ({n} of {n} requests " \
        "do not: is max_model_len right?)" in err, err


@pytest.mark.parametrize(("extra", "needle"), [
    (["--tp", "3"], "--tp: tensor-parallel size 3 does not divide the model's "
                    "num_attention_heads (32); vLLM refuses to start"),
    (["--max-num-batched-tokens", "16"], "--max-num-batched-tokens: max_num_batched_tokens "
                                         "16 is below max_num_seqs 64; vLLM refuses to start"),
])
def test_server_limits_vllm_would_refuse(tmp_path, capsys, extra, needle):
    """Once written and listed by `evolve data`, with only a note on the KV pool."""
    h, _ = write(tmp_path / "t")
    assert needle in refused(tmp_path, capsys, h, *extra)


@pytest.mark.parametrize("flag", ["--hardware", "--model"])
def test_a_directory_where_a_json_file_should_be(tmp_path, capsys, flag):
    """A GPU file or a model's config.json that is a directory: said so (was a traceback)."""
    h, _ = write(tmp_path / "t")
    bad = tmp_path / "bad"
    (bad / "config.json").mkdir(parents=True)
    err = refused(tmp_path, capsys, h, flag, str(bad))  # --model DIR reads DIR/config.json
    where = bad if flag == "--hardware" else bad / "config.json"
    assert f"{where}: cannot read (Is a directory)" in err, err


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("trace_version", 0, "field 'trace_version' is 0; BLIS writes 2"),
    ("server.gpu_memory_utilization", 90, "field 'server.gpu_memory_utilization' is 90; a "
                                          "share of GPU memory in (0, 1]"),  # percent
    ("server.gpu_memory_utilization", float("nan"), "field 'server.gpu_memory_utilization' is nan"),
])
def test_header_values_out_of_range(tmp_path, capsys, key, value, needle):
    """Were taken without a look; BLIS's --gpu-memory-utilization is refused outside (0, 1]."""
    h, _ = write(tmp_path / "a")  # the writer checks its header: edit the file after
    header = yaml.safe_load(h.read_text())
    where, _, leaf = key.rpartition(".")
    (header.setdefault(where, {}) if where else header)[leaf] = value
    h.write_text(yaml.safe_dump(header))
    assert f"{h}: {needle}" in refused(tmp_path, capsys, h)


def test_the_pool_note_reads_the_headers_memory_share(tmp_path, capsys, data_path):
    """At the header's gpu_memory_utilization 0.45, Llama-2-7B's 7,462 blocks (logged at
    vLLM's default 0.9) are about twice the budget: noted at that share."""
    from trace_helpers import columns

    header, cols = columns()
    header["server"]["gpu_memory_utilization"] = 0.45
    h, _ = write(tmp_path / "a", header, cols)
    flags = [f for f in FLAGS if f not in ("--kv-blocks", "3000")]
    code = main(["ingest", str(h), "--out", str(tmp_path / "d"), "--model",
                 str(data_path / "models" / "Llama-2-7b-hf"), *flags, "--kv-blocks", "7462"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "at TP 1 and gpu_memory_utilization 0.45" in out.out and "times the" in out.out, \
        out.out


def test_a_header_limit_of_zero_and_a_model_the_requests_contradict(tmp_path, capsys):
    """server.max_model_len: 0 was skipped as absent; a trace whose requests name another
    model than the header took the header's without a word."""
    from trace_helpers import columns

    header, cols = columns()
    header["server"]["max_model_len"] = 0
    h, _ = write(tmp_path / "a", header, cols)
    assert f"{h}: field 'server.max_model_len': must be positive, got 0" in refused(
        tmp_path, capsys, h)
    header, cols = columns()
    cols["model"] = ["synthetic/other-7b"] * len(cols["model"])
    h, d = write(tmp_path / "b", header, cols)
    assert (f"{d}: field 'model': the requests name 'synthetic/other-7b', the header's "
            "server.model 'synthetic/tiny-llama-1b'; say which with --model-id") in refused(
        tmp_path, capsys, h)


def test_a_model_short_name_that_cannot_key_constants(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    err = refused(tmp_path, capsys, h, "--model-short", "../../Évil name/x")
    assert "--model-short '../../Évil name/x': letters, digits" in err


def _records(d):
    path = d / "results" / "per_request_lifecycle_metrics.json"
    return path, json.loads(path.read_text())


def _perf_edit(d, what):
    if what in ("huge", "fraction"):
        path, rows = _records(d)
        rows[2]["info"]["input_tokens"] = 10**400 if what == "huge" else 491.7
        path.write_text(json.dumps(rows) if what == "fraction" else
                        json.dumps(rows).replace(str(10**400), "1" + "0" * 400))
    elif what == "contradiction":
        cfg = yaml.safe_load((d / "exp-config.yaml").read_text())
        (d / "exp-config.yaml").write_text(yaml.safe_dump({**cfg, "tensor_parallel_size": 2}))
    elif what in ("system_prompt", "output_len"):
        prof = yaml.safe_load((d / "profile.yaml").read_text())
        key, val = (("system_prompt_len", 1_000_000) if what == "system_prompt"
                    else ("output_len", 99_999_999))
        prof["data"]["shared_prefix"][key] = val
        (d / "profile.yaml").write_text(yaml.safe_dump(prof))
    elif what == "kv_tokens":
        (d / "vllm.log").write_text("INFO GPU KV cache size: 0 tokens\n")
    elif what in ("usage_text", "usage_list"):
        path, rows = _records(d)
        usage = {"completion_tokens": "12"} if what == "usage_text" else [3]
        rows[2]["info"]["response_metrics"] = {"server_usage": usage}
        path.write_text(json.dumps(rows))
    elif what == "model_type":
        cfg = yaml.safe_load((d / "exp-config.yaml").read_text())
        (d / "exp-config.yaml").write_text(yaml.safe_dump({**cfg, "model": 7}))


@pytest.mark.parametrize(("what", "needle"), [
    ("huge", "row 3, field 'input_tokens': "),
    ("fraction", "row 3, field 'input_tokens': not a whole number of tokens: 491.7"),
    ("contradiction", "field 'tensor_parallel_size' is 2, but"),
    ("system_prompt", "field 'system_prompt_len': 1000000 tokens, not shorter than the "
                      "longest prompt"),
    ("output_len", "field 'output_len': 99999999 output tokens do not fit max_model_len"),
    ("kv_tokens", "'GPU KV cache size: 0 tokens': not one block"),
    # the field read, not another one (once blamed on 'output_tokens', or ignored)
    ("usage_text", "row 3, field 'info.response_metrics.server_usage.completion_tokens': "),
    ("usage_list", "row 3, field 'info.response_metrics', field 'server_usage': not a mapping"),
    ("model_type", "exp-config.yaml: field 'model': not a model name (7)"),  # not "missing"
])
def test_inference_perf_mistakes(tmp_path, capsys, what, needle):
    d = perf_dir(tmp_path)
    _perf_edit(d, what)
    out = tmp_path / "data"
    flags = [] if what == "kv_tokens" else ["--kv-blocks", "3000"]
    code = main(["ingest", str(d), "--out", str(out), "--model", str(model_dir(tmp_path)),
                 "--hardware", "H100", *flags])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert not out.exists()


def test_an_ingest_killed_while_writing_leaves_nothing(tmp_path, monkeypatch):
    """SIGTERM (`kill`, `timeout`) mid-write unwinds like Ctrl-C: no half-written
    experiment, and the data directory it created is gone again."""
    import evaluator.data.experiment as experiment

    def killed(_path):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, mid-write

    monkeypatch.setattr(experiment, "load_experiment", killed)
    h, _ = write(tmp_path / "t")
    out = tmp_path / "new" / "data"
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        main(["ingest", str(h), "--out", str(out), "--model", str(model_dir(tmp_path)),
              *FLAGS])
    assert stop.value.code == 128 + signal.SIGTERM
    assert not (tmp_path / "new").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back


def test_commands_on_a_data_directory_without_the_runs_asked_for(tmp_path, capsys):
    """``validate --split test`` with no test run validated every run (names [] read as
    "all"); ``validate`` and ``baselines`` on a directory without experiments printed empty
    tables; both exit 0. Now one line, exit 2."""
    h, _ = write(tmp_path / "t")
    data = tmp_path / "data"
    assert main(["ingest", str(h), "--out", str(data), "--model", str(model_dir(tmp_path)),
                 *FLAGS]) == 0  # one training run
    capsys.readouterr()
    assert main(["validate", "linear", "--data", str(data), "--split", "test",
                 "--no-plots"]) == 2
    assert "--split test: no test runs" in capsys.readouterr().err
    (tmp_path / "empty" / "experiments").mkdir(parents=True)
    for argv in (["validate", "linear", "--no-plots"], ["baselines"]):
        assert main([*argv, "--data", str(tmp_path / "empty")]) == 2
        err = capsys.readouterr().err
        assert "experiments: no experiments" in err and err.count("\n") == 1, err


def test_a_trace_where_every_request_failed_is_refused(tmp_path, capsys):
    """Found in review: ingest and `evolve data` accepted it, then `evolve run --data`
    crashed (nothing to fit) and `evolve validate` said "no request completed"."""
    h, d = write(tmp_path / "t", n=8, failed=tuple(range(8)), errored=())
    err = refused(tmp_path, capsys, h)
    assert "no request completed with a measured time to first token (8 of 8 failed" in err
    assert str(d) in err, err


def test_inference_perf_without_any_token_times_is_refused(tmp_path, capsys):
    d = perf_dir(tmp_path)
    path = d / "results" / "per_request_lifecycle_metrics.json"
    rows = json.loads(path.read_text())
    for r in rows:
        r["info"]["output_token_times"] = []
    path.write_text(json.dumps(rows))
    err = refused(tmp_path, capsys, d)
    assert "15 completed without token times): nothing to score a model against" in err, err


def test_an_out_directory_whose_experiments_entry_is_a_file(tmp_path, capsys):
    h, _ = write(tmp_path / "t")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "experiments").write_text("mine")
    code = main(["ingest", str(h), "--out", str(tmp_path / "data"), "--model",
                 str(model_dir(tmp_path)), *FLAGS])
    err = capsys.readouterr().err
    assert code == 2 and "data/experiments: exists and is not a directory" in err, err
    assert (tmp_path / "data" / "experiments").read_text() == "mine"


def test_a_kv_pool_far_from_vllms_memory_budget_is_noted(tmp_path, capsys, data_path):
    """A pool of another convention (BLIS's auto-sized --total-kv-blocks counts every TP
    GPU) or a typo is noted, not refused: the server may have run at another memory
    share. Llama-2-7B on the H100: vLLM's budget gives the 7,462 blocks it logged."""
    h, _ = write(tmp_path / "t")
    model = data_path / "models" / "Llama-2-7b-hf"
    flags = [f for f in FLAGS if f not in ("--kv-blocks", "3000")]
    for blocks, needle in (("7462", None), ("14924", "is 2.00 times the 7462 per GPU"),
                           ("3000", "is 0.40 times the 7462 per GPU")):
        code = main(["ingest", str(h), "--out", str(tmp_path / f"d{blocks}"), "--model",
                     str(model), *flags, "--kv-blocks", blocks])
        out = capsys.readouterr()
        assert code == 0, out.err
        if needle is None:
            assert "KV pool" not in out.out
        else:
            assert needle in out.out and "check --kv-blocks" in out.out, out.out
