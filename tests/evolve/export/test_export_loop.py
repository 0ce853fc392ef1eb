"""``evolve export-go`` delivers constants for the engine loop the model runs in.

A tiny archived run (vLLM's loop, the default) is exported for stock BLIS: by default its
constants stay as fitted and the Go model carries vLLM's async scheduling (``--bridge
async``); with ``--bridge refit`` they are refitted closed loop in BLIS's loop,
deterministically. Either way the Go header and stderr carry the accuracy to expect.
``--no-refit`` and ``--loop vllm`` keep the archived constants; a run fitted in BLIS's loop
is exported as it is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evolve.archive import Archive
from evolve.cli.main import main
from evolve.config.schema import Config, apply_dict, validate
from evolve.search.loop import Search

SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen", "20260217-162547-llama-2-7b-tp1-roleplay"]


def _tiny_run(path: Path, loop: str = "vllm") -> Path:
    cfg = Config()
    apply_dict(cfg, {"run": {"seed": 7, "generations": 0, "head_seconds": 40.0,
                             "scenarios": SCENARIOS, "workers": 1, "progress": False,
                             "loop": loop},
                     "search": {"children": 2},
                     "fit": {"max_evals": 40, "restarts": 0, "window_steps": 300,
                             "seed_polish_evals": 4, "polish_evals": 6, "scope": "per_model"}},
               "test")
    cfg.run.archive = str(path)
    validate(cfg, "test")
    with Archive(path) as ar:
        Search(cfg, ar, log=lambda _m: None).run()
    return path


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory) -> Path:
    return _tiny_run(tmp_path_factory.mktemp("vllm") / "a.db")


def _champion(archive: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["frontier", "--archive", str(archive), "--json"]) == 0
    members = json.loads(capsys.readouterr().out)["members"]
    return next(m["id"] for m in members if m["picked"])


def _export(tmp_path, archive, pid, capsys, *extra) -> tuple[str, dict, str]:
    go, consts = tmp_path / "e.go", tmp_path / "c.json"
    capsys.readouterr()
    assert main(["export-go", pid, "--archive", str(archive), "-o", str(go),
                 "--save-constants", str(consts), *extra]) == 0
    err = capsys.readouterr().err
    return go.read_text(), json.loads(consts.read_text()), err


def _archived(archive: Path, pid: str) -> dict:
    with Archive(archive, create=False) as ar:
        full = ar.resolve_id(pid, None)
        return [e for e in ar.evaluations_of(full) if e.status == "accepted"][-1].constants


@pytest.mark.real_data
def test_default_export_carries_async_scheduling_with_the_constants_as_fitted(
        tmp_path, vllm_run, capsys):
    pid = _champion(vllm_run, capsys)
    text, consts, err = _export(tmp_path, vllm_run, pid, capsys)
    assert consts == _archived(vllm_run, pid)  # no refit
    assert "Expected accuracy in vLLM's engine loop, which this model carries" in err
    header, code = text.split("package latency")
    assert "the model carries vLLM's async scheduling" in header
    assert "// Expected accuracy in vLLM's engine loop, which this model carries" in header
    for name in SCENARIOS:
        assert re.search(rf"// {name[16:]}\s+train\s+\d", header)
    assert "m.async.stepBegins(batch, d)" in code and "return m.async.hold(req," in code
    plain, _, _ = _export(tmp_path, vllm_run, pid, capsys, "--loop", "vllm")
    assert "m.async" not in plain  # a BLIS with async scheduling of its own needs no clock


@pytest.mark.real_data
def test_export_refits_vllm_constants_for_blis_and_says_how_good(tmp_path, vllm_run, capsys):
    pid = _champion(vllm_run, capsys)
    text, consts, err = _export(tmp_path, vllm_run, pid, capsys, "--bridge", "refit")
    archived = _archived(vllm_run, pid)
    assert set(consts) == set(archived)
    assert consts != archived  # refitted in BLIS's loop
    header = text.split("package latency")[0]
    assert "// Engine loop: blis: refitted in BLIS's engine loop" in header
    m = re.search(r"training loss (\d+\.\d+) -> (\d+\.\d+)", header)
    assert m is not None and float(m.group(2)) < float(m.group(1))
    assert "// Expected accuracy in BLIS's engine loop" in header
    for name in SCENARIOS:  # one row per run, in the header and on stderr
        row = name[16:]
        assert re.search(rf"// {row}\s+train\s+\d", header)
        assert re.search(rf"{row}\s+train\s+\d", err)
    assert "m.async" not in text
    again, consts2, _ = _export(tmp_path, vllm_run, pid, capsys, "--bridge", "refit")
    assert again == text and consts2 == consts  # deterministic from the program id


@pytest.mark.real_data
def test_no_refit_and_vllm_loop_keep_the_archived_constants(tmp_path, vllm_run, capsys):
    pid = _champion(vllm_run, capsys)
    archived = _archived(vllm_run, pid)
    text, consts, _ = _export(tmp_path, vllm_run, pid, capsys, "--no-refit", "--bridge",
                              "refit")
    assert consts == archived  # no refit, no simulation
    assert ("// Engine loop: blis: constants fitted in vLLM's engine loop, exported as they "
            "are (--no-refit)") in text
    assert "Expected accuracy" not in text
    text, consts, _ = _export(tmp_path, vllm_run, pid, capsys, "--loop", "vllm")
    assert consts == archived
    assert "// Expected accuracy in vLLM's engine loop" in text
    assert "for a BLIS with vLLM's async scheduling (scripts/build_blis.py" in text


@pytest.mark.real_data
def test_a_run_fitted_in_blis_loop_exports_as_it_is(tmp_path, capsys):
    archive = _tiny_run(tmp_path / "b.db", loop="blis")
    with Archive(archive, create=False) as ar:
        assert ar.runs()[0].config["run"]["loop"] == "blis"
    pid = _champion(archive, capsys)
    text, consts, _ = _export(tmp_path, archive, pid, capsys)
    assert consts == _archived(archive, pid)
    assert "// Engine loop: blis: fitted in BLIS's engine loop, exported as they are" in text
    capsys.readouterr()
    assert main(["validate", pid, "--archive", str(archive), "--json", "--no-plots"]) == 0
    assert json.loads(capsys.readouterr().out)["loop"] == "blis"  # the run's loop by default
