"""Selection with the validate split in view: split losses, the pick rule, the champion."""

from __future__ import annotations

import math

import pytest

from evolve.search.grid import Elite
from evolve.search.pareto import Frontier
from evolve.search.selection import champion, selection_loss, split_loss


def _e(pid: str, loss: float, cx: int, val: float = math.nan) -> Elite:
    return Elite(program_id=pid, loss=loss, complexity=cx, n_features=1, generation=0,
                 val_loss=val)


def _m(split: str, e2e: float, ttft: float, itl: float = 0.0, valid: bool = True,
       failed: float = 0.0, failures_ape: float = 0.0) -> dict:
    return {"split": split, "valid": valid, "meas": {"failures": failed},
            "ape": {"e2e_mean": e2e, "ttft_mean": ttft, "itl_mean": itl,
                    "failures": failures_ape}}


def test_split_loss_over_e2e_ttft_decode_and_many_failures():
    metrics = {"a": _m("train", 0.1, 0.3, 0.2), "b": _m("validate", 0.2, 0.0, 0.1),
               "c": _m("validate", 0.0, 0.4, 0.0, failed=3294, failures_ape=0.5),
               "d": _m("test", 9.0, 9.0, 9.0)}
    assert split_loss(metrics, "train") == pytest.approx(math.sqrt((0.01 + 0.09 + 0.04) / 3))
    want = math.sqrt(((0.04 + 0.01) / 3 + (0.16 + 0.25) / 4) / 2)
    assert split_loss(metrics, "validate") == pytest.approx(want)
    # fewer than 100 measured failures: the failure count is not a term
    metrics["c"] = _m("validate", 0.0, 0.4, failed=4, failures_ape=297.0)
    assert split_loss(metrics, "validate") == pytest.approx(math.sqrt((0.05 / 3 + 0.16 / 3) / 2))
    assert math.isnan(split_loss(metrics, "nothing"))
    assert math.isnan(split_loss(None, "train"))
    metrics["c"] = _m("validate", 0.0, 0.4, valid=False)
    assert split_loss(metrics, "validate") == math.inf


def test_pick_reads_validate_among_eligible_members():
    # p0 generalises best but its training loss is outside the tolerance: not eligible
    elites = [_e("p0", 0.30, 2, val=0.01), _e("p1", 0.10, 3, val=0.50),
              _e("p3", 0.08, 8, val=0.20), _e("p4", 0.07, 12, val=0.10)]
    fr = Frontier.from_elites(elites, tolerance=1.5)
    assert [m.program_id for m in fr.members] == ["p0", "p1", "p3", "p4"]
    assert fr.pick().program_id == "p4"
    # PySR's rule reads training loss only: p0 -> p1 buys the most per unit of complexity
    assert Frontier.from_elites(elites, 1.5, "pysr").pick().program_id == "p1"
    assert "validate" in fr.rule and "PySR" in fr.rule


def test_pick_falls_back_to_pysr_without_validate_runs():
    elites = [_e("p1", 0.10, 3), _e("p3", 0.08, 8), _e("p4", 0.07, 12)]
    assert (Frontier.from_elites(elites, 1.5).pick()
            == Frontier.from_elites(elites, 1.5, "pysr").pick())


def test_pick_prefers_finite_validate_and_breaks_ties_by_training_loss():
    elites = [_e("a", 0.10, 3, val=math.inf), _e("b", 0.09, 5, val=0.3),
              _e("c", 0.08, 7, val=0.3)]
    assert Frontier.from_elites(elites, 2.0).pick().program_id == "c"


def test_unknown_pick_rule_is_refused():
    with pytest.raises(ValueError, match="pick rule"):
        Frontier.from_elites([], 1.5, "magic")


def test_champion_balances_training_and_validate():
    elites = [_e("fit", 0.05, 20, val=0.60), _e("both", 0.06, 9, val=0.05),
              _e("far", 0.50, 3, val=0.00)]
    assert champion(elites, tolerance=1.5).program_id == "both"
    assert champion([_e("x", 0.05, 3), _e("y", 0.04, 5)], 1.5).program_id == "y"
    assert champion([], 1.5) is None
    assert selection_loss(0.3, math.nan) == 0.3
    assert selection_loss(0.3, 0.4) == pytest.approx(math.sqrt(0.125))


def test_pick_reads_the_hall_of_fame_not_only_the_frontier():
    # d (cx 9) is dominated by c (cx 7, lower training loss) but holds on the validate runs;
    # e shares d's complexity with a worse loss, so it is not in the hall of fame at all
    elites = [_e("a", 0.30, 2, val=0.05), _e("b", 0.10, 3, val=0.50),
              _e("c", 0.08, 7, val=0.30), _e("d", 0.09, 9, val=0.10),
              _e("e", 0.095, 9, val=0.01)]
    fr = Frontier.from_elites(elites, tolerance=1.5)
    assert [m.program_id for m in fr.members] == ["a", "b", "c"]
    assert [m.program_id for m in fr.hall] == ["a", "b", "c", "d"]
    assert fr.pick().program_id == "d"  # eligible (0.09 <= 1.5 x 0.08), lowest validate
    assert "hall of fame" in fr.rule
    # a is the best on validate but outside the tolerance; PySR's rule reads the frontier
    # scores -dlog(loss)/dcomplexity: b 1.10 against c 0.056 (both eligible)
    assert Frontier.from_elites(elites, 1.5, "pysr").pick().program_id == "b"
    assert Frontier.from_elites(elites, 1.1).pick().program_id == "c"  # d: 0.09 > 0.088
