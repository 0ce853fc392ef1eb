"""The generation loop: determinism, worker-count independence, budgets, no held-out leaks.

Tiny runs: three measured runs (one per split) cut to their first seconds, few children,
small fitting budgets, so each search takes seconds.
"""

from __future__ import annotations

import pytest

from evolve.archive import Archive
from evolve.config.schema import Config, apply_dict, validate
from evolve.operators.offline.operator import OfflineOperator
from evolve.search.loop import Search

pytestmark = pytest.mark.real_data  # tiny searches over three bundled runs

SCENARIOS = ["20260217-155451-llama-2-7b-tp1-codegen",      # train
             "20260218-150956-codellama-34b-tp2-codegen",   # validate
             "20260217-170634-llama-2-7b-tp1-reasoning"]    # test

TINY = {"run": {"generations": 3, "head_seconds": 20.0, "scenarios": SCENARIOS,
                "workers": 1, "progress": False},
        "search": {"children": 3, "refresh_min_gap": 1, "refresh_margin": 0.02},
        "fit": {"max_evals": 40, "restarts": 0, "window_steps": 300}}


def tiny_config(archive, **overrides) -> Config:
    cfg = Config()
    apply_dict(cfg, TINY, "test")
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        apply_dict(cfg, {section: {key: value}}, "test")
    cfg.run.archive = str(archive)
    return validate(cfg, "test")


def run_tiny(path, operator=None, **overrides):
    cfg = tiny_config(path, **overrides)
    with Archive(path) as archive:
        summary = Search(cfg, archive, operator=operator, log=lambda _m: None).run()
        return summary, archive.comparable()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "a.db"
    return run_tiny(path, run__seed=11)


def test_same_seed_same_archive_any_worker_count(reference, tmp_path):
    summary, tables = reference
    assert summary.status == "finished" and summary.generations_done == 3
    assert summary.evaluations > 0
    again, tables2 = run_tiny(tmp_path / "b.db", run__seed=11, run__workers=2)
    assert again.best_id == summary.best_id
    for name in tables:
        assert tables2[name] == tables[name], f"table {name} differs"
    # every table the design names is populated
    for name in ("runs", "programs", "evaluations", "grid_cells", "frontier",
                 "corpus_versions"):
        assert tables[name], name


def test_other_seed_differs(reference, tmp_path):
    _summary, tables = reference
    _s, other = run_tiny(tmp_path / "c.db", run__seed=12)
    assert other["evaluations"] != tables["evaluations"]


def test_selection_sees_training_errors_only(tmp_path):
    seen: list[set[str]] = []

    class Spy(OfflineOperator):
        def propose(self, parents, inspirations, rng, n):
            for p in [*parents, *inspirations]:
                seen.append(set(p.train_errors))
            return super().propose(parents, inspirations, rng, n)

    _summary, tables = run_tiny(tmp_path / "d.db", operator=Spy(), run__generations=1)
    assert seen and all(s and {k.split('@')[0] for k in s} == {SCENARIOS[0]} for s in seen)
    splits = tables["runs"][0]["splits"]
    assert splits == {SCENARIOS[0]: "train", SCENARIOS[1]: "validate", SCENARIOS[2]: "test"}
    # validate/test metrics are stored nonetheless
    accepted = [e for e in tables["evaluations"] if e["status"] == "accepted"]
    assert all({k.split("@")[0] for k in e["metrics"]} == set(SCENARIOS) for e in accepted)


def test_evaluation_budget_stops_cleanly(tmp_path):
    summary, tables = run_tiny(tmp_path / "e.db", run__max_evaluations=4)
    assert summary.status == "stopped:evaluations"
    assert sum(e["kind"] == "child" for e in tables["evaluations"]) == 4
    assert tables["runs"][0]["generations_done"] == summary.generations_done


def test_rejections_are_stored_with_reasons(reference):
    _summary, tables = reference
    for e in tables["evaluations"]:
        assert (e["status"] == "accepted") == (e["reason"] == ""), e
        if e["kind"] == "screen":
            assert e["status"] == "rejected" and e["n_evals"] == 0


def _budget_run(db, **overrides):
    """A tiny LLM-only run against a real server on 127.0.0.1 whose every reply costs 100
    tokens, with a 500-token budget: (summary, tables, requests the server answered)."""
    from llm_server import LLMServer, Reply, fenced, program_for

    def responder(request: dict, n: int) -> Reply:
        return Reply(content=fenced(program_for(int(request.get("seed") or n))),
                     prompt_tokens=60, completion_tokens=40)

    with LLMServer(responder, lifetime_s=170) as server:
        summary, tables = run_tiny(
            db, operator__kind="llm", operator__llm_share=1.0, llm__model="test-model",
            llm__base_url=server.base_url, llm__api_key_env="EVOLVE_TEST_NO_SUCH_KEY",
            llm__retries=1, llm__timeout_s=10.0, llm__max_total_tokens=500, **overrides)
        return summary, tables, len(server.requests)


def test_llm_calls_are_archived_and_the_token_budget_stops_the_run(tmp_path):
    """The LLM operator against a real OpenAI-compatible server on 127.0.0.1
    (tests/support/llm_server.py), whose usage figures make every reply cost 100 tokens: each call
    is archived, and the run stops once the token budget is spent."""
    # one batch ahead (the default): what is served is exact, not timing
    summary, tables, served = _budget_run(tmp_path / "f.db")
    # 3 children x 100 tokens per generation: the budget is crossed during generation 2
    assert summary.status == "stopped:llm_tokens" and summary.generations_done == 2
    calls = tables["llm_calls"]
    assert len(calls) == served == 6 and {c["model"] for c in calls} == {"test-model"}
    assert {c["prompt_tokens"] + c["completion_tokens"] for c in calls} == {100}
    assert "latency_s" not in calls[0]  # wall clock is left out of comparisons


def test_batches_sent_ahead_past_a_token_budget_are_never_archived(tmp_path):
    """Two batches ahead (``lookahead = 2``): generation 3's batch is sent at generation 1,
    before the budget is crossed in generation 2. The run still stops there and archives
    only what it used; the endpoint may have answered up to that batch more."""
    summary, tables, served = _budget_run(tmp_path / "g.db", operator__lookahead=2)
    assert summary.status == "stopped:llm_tokens" and summary.generations_done == 2
    assert len(tables["llm_calls"]) == 6 and 6 <= served <= 9


def test_an_llm_that_never_gives_a_program_is_said_so(tmp_path):
    """A real endpoint answering empty text to every request: the run used to finish with
    "0 children fitted" and nothing said; each such generation is now named in the log."""
    from llm_server import LLMServer, Reply

    logs: list[str] = []
    cfg = tiny_config(tmp_path / "e.db", run__generations=1, operator__kind="llm",
                      operator__llm_share=1.0,
                      llm__model="test-model", llm__api_key_env="EVOLVE_TEST_NO_SUCH_KEY",
                      llm__retries=0, llm__timeout_s=10.0)
    with LLMServer(lambda _req, _n: Reply(content=""), lifetime_s=120) as server:
        cfg.llm.base_url = server.base_url
        with Archive(tmp_path / "e.db") as archive:
            summary = Search(cfg, archive, log=logs.append).run()
    assert summary.status == "finished" and summary.evaluations == 0
    said = [m for m in logs if m.startswith("generation 1: none of the 3 proposals held a "
                                            "program (3 x ")]
    assert len(said) == 1, logs


def test_teacher_forced_fitness_compares_generation_zero_on_one_corpus(tmp_path):
    """With ``fit.fitness = "teacher_forced"`` a score is the corpora's: when the best seed's
    corpora are adopted, every seed's first fit is re-scored on them before it competes
    with its refit, and recorded, so each elite's row carries its grid loss (a resume
    checks exactly that) and the grid compares like with like."""
    path = tmp_path / "tf.db"
    summary, _tables = run_tiny(path, run__seed=11, run__generations=0,
                                fit__fitness="teacher_forced", search__refresh_gate=False)
    with Archive(path) as ar:
        adopted = [r for r in ar.corpus_versions(summary.run_id) if r.adopted]
        assert len(adopted) == 2  # the bootstrap's and the best seed's (no gate)
        latest = ar.latest_accepted(summary.run_id)
        for cell in ar.grid(summary.run_id, 0):
            row = latest[cell.program_id]
            assert row.loss == cell.loss and row.corpus_version == adopted[-1].version
        assert any(e.kind == "rescore" for e in ar.evaluations(summary.run_id))
    cfg = tiny_config(path, run__seed=11, run__generations=1, fit__fitness="teacher_forced",
                      search__refresh_gate=False)
    with Archive(path) as ar:  # the resume rebuilds the grid from those rows
        again = Search(cfg, ar, run_id=summary.run_id, log=lambda _m: None).run()
    assert again.status == "finished"


def test_a_bootstrap_seed_that_cannot_simulate_is_named(tmp_path):
    """The first corpora have nothing to fall back on: a bootstrap seed whose simulation
    fails at its initial constants is a one-line error naming it, not cut-off batches."""
    from evolve.errors import UserError

    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "broken.py").write_text(
        '"""Negative from five requests on."""\n'
        'CONSTANTS = {"a": (20000.0, 1.0, 40000.0), "b": (4900.0, 0.0, 9000.0)}\n\n'
        "def step_time(f, c):\n    return c.a - c.b * f.batch_size\n")
    with pytest.raises(UserError, match=r"seed [0-9a-f]{12} cannot simulate the runs at its "
                                        r"initial constants \(.*step time not finite"):
        run_tiny(tmp_path / "b.db", run__seed=11, run__seeds_dir=str(seeds),
                 search__bootstrap_seed="broken")
