"""evolve.workflows.generalize: the flags that contradict how a held-out run gets constants
are refused before any run loads; the JSON document and the fitted runs' APEs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evolve.errors import UserError
from evolve.workflows.generalize import (
    Generalization,
    GeneralizeOptions,
    fitted_apes,
    unseen_of,
)


def test_lomo_calibrates_to_the_rule_unless_told_or_the_rule_itself():
    assert unseen_of(GeneralizeOptions("lomo"), "linear") == "layered"
    assert unseen_of(GeneralizeOptions("lomo", unseen="global"), "linear") == "global"
    assert unseen_of(GeneralizeOptions("lomo"), "layered") == "global"  # the rule's own LOMO
    assert unseen_of(GeneralizeOptions("lowo", scope="pooled"), "linear") == "global"


@pytest.mark.parametrize("opts, needle", [
    (GeneralizeOptions("lowo", unseen="layered"), "--unseen: applies to --mode lomo"),
    (GeneralizeOptions("lomo", scope="global"), "--scope global: not used"),
    (GeneralizeOptions("lomo", polish_evals=0), "--polish-evals 0: not used"),
    (GeneralizeOptions("lomo", unseen="global", scope="per_model"), "--scope per_model"),
])
def test_contradicting_flags_are_refused(opts, needle):
    with pytest.raises(UserError, match=needle):
        unseen_of(opts, "linear")


def test_fitted_apes_reads_each_run_and_marks_a_missing_one_infinite():
    sims = {"b": SimpleNamespace(metrics=SimpleNamespace(ape={"e2e_mean": 0.1})),
            "a": SimpleNamespace(metrics=SimpleNamespace(ape={"e2e_mean": 0.2,
                                                               "ttft_mean": 0.3,
                                                               "itl_mean": 0.4}))}
    apes = fitted_apes(sims)
    assert list(apes) == ["a", "b"]
    assert apes["a"] == {"e2e_mean": 0.2, "ttft_mean": 0.3, "itl_mean": 0.4}
    assert apes["b"]["ttft_mean"] == float("inf")


def test_as_dict_is_the_json_document():
    gen = Generalization(SimpleNamespace(id="abc"), "lowo", 7, "per_model", 40, 0, "global",
                         {"codegen": {}}, {"codegen": {}}, {"codegen": {}}, {}, 3, 4)
    doc = gen.as_dict()
    assert doc["program"] == "abc" and doc["normal_within_10pct"] == {"runs": 3, "of": 4}
    assert sorted(doc) == ["constants", "fitted", "folds", "max_evals", "mode",
                           "normal_within_10pct", "polish_evals", "program", "scope", "seed",
                           "sensitivity", "unseen"]
