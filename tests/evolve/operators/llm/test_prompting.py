"""The mutation prompt (evolve.operators.llm.prompting): the glossary and the training errors go
in, held-out runs never do (a leak raises), errors are signed when the prediction is known,
and a prompt over its token cap is cut from the inspirations and batch rows first."""

from __future__ import annotations

import pytest
from llm_server import HELDOUT_RUNS, LINEAR, TRAIN_RUNS, make_parent

from evaluator.features.glossary import FEATURES
from evolve.operators.llm.prompting import HeldoutLeak, build_prompt, estimate_tokens


@pytest.fixture(scope="module")
def parents():
    return [make_parent(), make_parent(LINEAR, loss=0.31, scale=1.2)]


def test_prompt_has_glossary_and_training_errors_only(parents):
    prompt = build_prompt("mutate", parents[:1], parents[1:], 12000, heldout=HELDOUT_RUNS)
    system, user = (m["content"] for m in prompt.messages)
    for e in FEATURES:
        assert f"| {e.name} | {e.unit} |" in system
    assert "CONSTANTS" in system and "at most 30" in system
    for run in TRAIN_RUNS:
        assert run in user
    assert "44.0%" in user  # TTFT APE of the worst training run
    assert parents[0].program.source.strip() in user and LINEAR.split("\n")[0] in user
    assert "```python" in user
    text = (system + user).lower()
    for word in ("validate", "validation", "test run", *HELDOUT_RUNS):
        assert word not in text
    assert prompt.tokens <= 12000 and prompt.cuts == {}


def test_errors_are_signed_when_pred_and_meas_are_given():
    p = make_parent()
    run = TRAIN_RUNS[1]
    p.train_errors[run].update(pred_e2e_mean=12.1, meas_e2e_mean=10.0,
                               pred_ttft_mean=0.28, meas_ttft_mean=0.5)
    user = build_prompt("mutate", [p], [], 12000).messages[1]["content"]
    assert f"| {run} | +21.0% | -44.0% | 12.0% |" in user
    assert "sign + = simulated slower" in user
    plain = build_prompt("mutate", [make_parent()], [], 12000).messages[1]["content"]
    assert f"| {run} | 21.0% | 44.0% | 12.0% |" in plain and "sign +" not in plain


def test_heldout_errors_never_reach_a_prompt(parents):
    leaky = make_parent()
    leaky.train_errors[HELDOUT_RUNS[0]] = {"e2e_mean": 0.1, "ttft_mean": 0.2}
    with pytest.raises(HeldoutLeak, match=HELDOUT_RUNS[0]):
        build_prompt("mutate", [leaky], [], 12000, heldout=HELDOUT_RUNS)
    sneaky = make_parent(worst=f"| run |\n|---|\n| {HELDOUT_RUNS[1]} |")
    with pytest.raises(HeldoutLeak, match=HELDOUT_RUNS[1]):
        build_prompt("mutate", [sneaky], [], 12000, heldout=HELDOUT_RUNS)


def test_prompt_is_cut_to_the_cap(parents):
    many = [make_parent(LINEAR, loss=0.3 + i / 100) for i in range(3)]
    full = build_prompt("mutate", parents[:1], many, 100000)
    assert full.cuts == {}
    cap = build_prompt("mutate", parents[:1], many[:2], 100000).tokens  # room for 2 of 3
    cut = build_prompt("mutate", parents[:1], many, cap)
    assert full.tokens > cap and cut.tokens <= cap and cut.cuts == {"inspirations": 1}
    bare = build_prompt("mutate", parents[:1], [], 100000)
    tiny = build_prompt("mutate", parents[:1], many, bare.tokens - 100)
    assert tiny.tokens <= bare.tokens - 100
    assert tiny.cuts["inspirations"] == 3 and tiny.cuts["batch_rows"] > 0
    assert "more rows omitted" in tiny.messages[1]["content"]


def test_estimate_tokens_is_not_below_len_over_4():
    prompt = build_prompt("mutate", [make_parent()], [], 100000)
    for m in prompt.messages:
        assert estimate_tokens(m["content"]) >= len(m["content"]) / 4


@pytest.mark.parametrize("profile", ["full", "compact"])
def test_transfer_rows_come_with_what_they_mean(profile):
    p = make_parent()
    run = TRAIN_RUNS[0]
    plain = build_prompt("mutate", [p], [], 12000, HELDOUT_RUNS, profile).messages[1]["content"]
    assert "~lomo" not in plain  # a run that does not price transfer: the prompt as before
    p.train_errors[run + "~lomo"] = {"e2e_mean": 0.35, "ttft_mean": 0.5}
    user = build_prompt("mutate", [p], [], 12000, HELDOUT_RUNS, profile).messages[1]["content"]
    assert f"| {run}~lomo | 35.0% | 50.0% |" in user
    assert "Rows ending in ~lomo" in user and "WITHOUT its model" in user
