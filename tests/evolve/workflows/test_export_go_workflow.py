"""evolve.workflows.export_go: a program file's declared constants exported offline, the
groups a --model or --alias names, and the scores' header lines."""

from __future__ import annotations

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
