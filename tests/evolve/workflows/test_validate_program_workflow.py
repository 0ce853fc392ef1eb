"""evolve.workflows.validate_program: a seed validated closed loop on short cuts of four
real runs (the data loader replaced), its JSON document and the plots' record."""

from __future__ import annotations

import json

import pytest

from evolve.errors import UserError
from evolve.workflows.targets import load_fitted
from evolve.workflows.validate_program import ValidateOptions, validate_program, write_plots


class _Flags:
    program, archive, run, constants, scope = "linear", "archive.db", None, None, None


@pytest.fixture()
def loaded(monkeypatch, small_evaluator):
    import evaluator.api

    asked: dict = {}

    def from_data(_cls, data=None, **kw):
        asked.update(kw, data=data)
        return small_evaluator

    monkeypatch.setattr(evaluator.api.Evaluator, "from_data", classmethod(from_data))
    return asked


def test_validate_program_simulates_the_split_and_records_the_plots(loaded, tmp_path):
    program, groups, label, _loop = load_fitted(_Flags())
    said: list[str] = []
    opts = ValidateOptions("train", "per_model", None, "D", {"loop": "vllm"}, 0.1, 2.0)
    done = validate_program(program, groups, label, opts, said.append)
    assert loaded == {"data": "D", "loop": "vllm", "step_noise": 0.1, "host_us_per_open": 2.0,
                      "host_floor_us": 0.0}
    assert done.names and set(done.validation.metrics) == set(done.names)
    assert said[0].startswith(f"validating {label} (scope per_model) closed loop on "
                              f"{len(done.names)} runs")
    assert {"program", "runs", "step_noise", "percentiles_within_10pct",
            "host_floor_us"} <= set(done.as_dict())
    assert done.simulated == {"groups": groups, "scope": "per_model"}  # not the groups' own
    (tmp_path / "o").mkdir()
    write_plots(done, tmp_path / "o")
    record = json.loads((tmp_path / "o" / "plots.json").read_text())
    assert record["runs"] == sorted(done.names) and record["scope"] == "per_model"


def test_a_split_without_runs_is_refused(loaded):
    program, groups, label, _loop = load_fitted(_Flags())
    with pytest.raises(UserError, match="--split test: no test runs"):
        validate_program(program, groups, label, ValidateOptions("test"), print)


def test_host_floor_is_measured_per_run_or_one_number(data_path):
    """``--host-floor measured`` floors each run at its own sampled host time, on the
    overloaded Mixtral and CodeLlama runs over four times any normal run's (the mechanism it
    shows); a number is every run's."""
    from evolve.workflows.validate_program import host_floors

    assert host_floors(None, None) == 0.0
    assert host_floors("2500", None) == 2500.0
    floors = host_floors("measured", str(data_path))
    assert isinstance(floors, dict) and len(floors) == 16
    normal = [v for n, v in floors.items() if "reasoning" not in n]
    heavy = [v for n, v in floors.items() if "reasoning" in n and ("mixtral" in n
                                                                   or "codellama" in n)]
    assert len(normal) == 12 and len(heavy) == 2 and min(heavy) > 4 * max(normal)
    for bad in ("abc", "-1", "inf", "nan"):
        with pytest.raises(UserError, match="--host-floor: 'measured' or a finite number"):
            host_floors(bad, None)


def test_validate_program_passes_the_floor_to_the_simulator(loaded):
    program, groups, label, _loop = load_fitted(_Flags())
    opts = ValidateOptions("train", None, None, "D", {"loop": "vllm"}, host_floor="3000")
    done = validate_program(program, groups, label, opts, print)
    assert loaded["host_floor_us"] == 3000.0
    assert set(done.host_floor_us) == set(done.names)  # the floor each simulated run had
