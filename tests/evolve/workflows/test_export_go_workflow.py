"""evolve.workflows.export_go: a program file's declared constants exported offline, the
groups a --model or --alias names, and the scores' header lines."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from evolve.errors import UserError
from evolve.workflows.export_go import ExportOptions, _summary, export, group_infos
from evolve.workflows.targets import SEEDS_DIR


def test_a_seed_exports_its_declared_values_without_data():
    said: list[str] = []
    opts = ExportOptions(str(SEEDS_DIR / "linear.py"), True, no_refit=True, data=None)
    done = export(opts, said.append)
    assert done.scope == "global" and list(done.constants) == ["global"]
    assert "package " in done.text and "LatencyModel" in done.text
    assert "declared by the program, not fitted, exported as they are" in done.text
    assert said == []


@pytest.mark.parametrize("extra, needle", [
    ({"alias": ["nosuch=x"]}, "--alias nosuch=x: expected GROUP=NAME"),
    ({"model": "nosuch"}, "--model nosuch: no constant group matches"),
    ({"fitted_loop": "vllm"}, "--fitted-loop: says where --constants were fitted"),
    ({"bridge": "refit"}, "--bridge refit: applies to constants fitted in vLLM's engine loop; "
                          "these are the program's declared values"),
    ({"bridge": "async", "loop": "vllm"}, "--bridge async: applies to --loop blis"),
])
def test_flags_naming_nothing_are_refused(extra, needle):
    opts = ExportOptions(str(SEEDS_DIR / "linear.py"), True, no_refit=True, **extra)
    with pytest.raises(UserError, match=needle):
        export(opts, lambda _m: None)


def test_group_infos_alias_a_model_by_its_id_and_note_its_runs():
    names = {"run-a": {"model": "m7", "model_id": "org/M7", "tp": "1"},
             "run-b": {"model": "m70", "model_id": "org/M70", "tp": "4"}}
    infos = group_infos("per_model", ["m7", "global"], names)
    assert infos["m7"].aliases == ("m7", "org/m7") and "run-a (tp 1)" in infos["m7"].note
    assert infos["global"].aliases == ("global",)


def test_summary_says_how_each_split_was_scored():
    metrics = {"a": {"split": "train", "mode": "closed_loop_slice",
                     "ape": {"e2e_mean": 0.1, "ttft_mean": 0.2}},
               "b": {"split": "train", "ape": {"e2e_mean": 0.3, "ttft_mean": 0.4}}}
    assert _summary(metrics) == {"Scores (train, 2 runs and slices, closed loop and teacher "
                                 "forced)": "mean APE E2E 20.00 %, TTFT 30.00 %"}


def test_a_refit_without_a_groups_runs_is_refused_before_it_starts(tmp_path, data_path):
    """Constants for two models, a data directory with the runs of one: the refit for
    BLIS's loop cannot price the other, so the export says so (it once crashed with a
    KeyError after the refit's minutes) and names the ways out."""
    part = tmp_path / "data"
    (part / "experiments").mkdir(parents=True)
    for d in ("hardware", "kernels", "models"):
        (part / d).symlink_to((data_path / d).resolve())
    for e in (data_path / "experiments").glob("*llama-2-7b-tp1*"):
        (part / "experiments" / e.name).symlink_to(e.resolve())
    c = {"b0_us": 8000.0, "prefill_us": 20.0, "decode_us": 50.0}
    opts = ExportOptions(str(SEEDS_DIR / "linear.py"), True, data=str(part),
                         constants=json.dumps({"llama-2-7b": c, "codellama-34b": c}),
                         fitted_loop="vllm", bridge="refit")
    with pytest.raises(UserError, match=r"no measured run of codellama-34b, whose constants "
                                        r"the refit .* --model NAME .* or --no-refit"):
        export(opts, lambda _m: None)
    said: list[str] = []  # the default export needs no refit: the runs there are scored
    done = export(replace(opts, bridge="async"), said.append)
    assert set(done.constants) == {"llama-2-7b", "codellama-34b"}
    assert "the model carries vLLM's async scheduling" in done.text
    assert any("llama-2-7b-tp1-codegen" in s for s in said)
