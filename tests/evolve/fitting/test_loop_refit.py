"""A loop refit keeps a polish group by group (``better_groups``), where its validate runs hold.

The training loss is a sum over constant groups (they share no run), so a polish that helps
one model and hurts another must keep the first model's constants: judged as a whole set
it was thrown away.
"""

from __future__ import annotations

from evaluator.api import RunMetrics
from evolve.fitting.loop_refit import better_groups


def _run(name: str, model: str, e2e: float, ttft: float) -> RunMetrics:
    return RunMetrics(name=name, split="train", model=model, workload="w",
                      ape={"e2e_mean": e2e, "ttft_mean": ttft})


MEMBERS = {"a": ["a1", "a2"], "b": ["b1"], "global": []}
BASE = {"a": {"k": 1.0}, "b": {"k": 2.0}, "global": {"k": 3.0}}
CAND = {"a": {"k": 1.5}, "b": {"k": 2.5}, "global": {"k": 9.0}}
BASE_RUNS = {"a1": _run("a1", "a", 0.05, 0.02), "a2": _run("a2", "a", 0.04, 0.03),
             "b1": _run("b1", "b", 0.01, 0.01)}


def test_a_group_that_improves_is_kept_while_one_that_worsens_is_not() -> None:
    cand_runs = {"a1": _run("a1", "a", 0.01, 0.01), "a2": _run("a2", "a", 0.02, 0.01),
                 "b1": _run("b1", "b", 0.20, 0.10)}  # a better, b much worse: sum worse
    out = better_groups(BASE, CAND, BASE_RUNS, cand_runs, MEMBERS)
    assert out == {"a": {"k": 1.5}, "b": {"k": 2.0}, "global": {"k": 3.0}}


def test_a_group_is_judged_on_all_its_runs_not_the_best_one() -> None:
    cand_runs = {"a1": _run("a1", "a", 0.0, 0.0), "a2": _run("a2", "a", 0.30, 0.0),
                 "b1": _run("b1", "b", 0.0, 0.0)}  # a1 perfect, a2 far off: a worse
    out = better_groups(BASE, CAND, BASE_RUNS, cand_runs, MEMBERS)
    assert out["a"] == BASE["a"] and out["b"] == CAND["b"]


def test_an_invalid_run_rejects_its_group() -> None:
    cand_runs = {**BASE_RUNS, "a1": _run("a1", "a", 0.0, 0.0),
                 "a2": RunMetrics(name="a2", split="train", model="a", workload="w",
                                  valid=False, reason="overloaded")}
    assert better_groups(BASE, CAND, BASE_RUNS, cand_runs, MEMBERS)["a"] == BASE["a"]


def test_the_result_is_a_copy() -> None:
    out = better_groups(BASE, CAND, BASE_RUNS, BASE_RUNS, MEMBERS)
    out["a"]["k"] = 99.0
    assert BASE["a"]["k"] == 1.0


GUARD = {"a": ["av"], "b": []}
BASE_HELD = {**BASE_RUNS, "av": RunMetrics(name="av", split="validate", model="a",
                                           workload="w", ape={"e2e_mean": 0.05,
                                                              "ttft_mean": 0.05})}
BETTER_A = {"a1": _run("a1", "a", 0.01, 0.01), "a2": _run("a2", "a", 0.01, 0.01),
            "b1": _run("b1", "b", 0.0, 0.0)}


def _held(e2e: float) -> RunMetrics:
    return RunMetrics(name="av", split="validate", model="a", workload="w",
                      ape={"e2e_mean": e2e, "ttft_mean": 0.05})


def test_a_polish_that_costs_its_validate_runs_is_not_kept() -> None:
    """As the search's polish: training loss bought with held-out accuracy is refused."""
    out = better_groups(BASE, CAND, BASE_HELD, {**BETTER_A, "av": _held(0.09)}, MEMBERS,
                        GUARD)
    assert out["a"] == BASE["a"] and out["b"] == CAND["b"]  # b has no validate run


def test_a_polish_within_the_validate_slack_is_kept() -> None:
    out = better_groups(BASE, CAND, BASE_HELD, {**BETTER_A, "av": _held(0.0505)}, MEMBERS,
                        GUARD)
    assert out["a"] == CAND["a"]


def test_an_invalid_validate_run_before_the_polish_does_not_block_it() -> None:
    was = {**BASE_HELD, "av": RunMetrics(name="av", split="validate", model="a",
                                         workload="w", valid=False, reason="overloaded")}
    out = better_groups(BASE, CAND, was, {**BETTER_A, "av": _held(0.5)}, MEMBERS, GUARD)
    assert out["a"] == CAND["a"]
