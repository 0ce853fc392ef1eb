"""Repair in the loop (issue 59): an LLM child rejected after fitting gets bounded offline
repair edits, each a child whose parent is the LLM program, fitted at the positions after
the generation's proposals; offline children are never repaired."""

from __future__ import annotations

from types import SimpleNamespace

from evolve.config.schema import Config
from evolve.operators.base import Proposal
from evolve.search.books import Books
from evolve.search.children import evaluate_children
from evolve.search.context import Scored
from evolve.search.rng import child_seed

SLOPE = "physics (m): step time grows by 0.0 us from 'a' to 'b', less than 90% of 9 us"


def program(k: int) -> str:
    return (f'"""Small model program {k}."""\n'
            f'CONSTANTS = {{"k0": ({1000.0 + k}, 0.0, 10000.0), "k1": (1.5, 0.0, 10.0)}}\n\n'
            "def step_time(f, c):\n"
            f"    return c.k0 + c.k1 * f.decode_tokens * {k + 1}.0\n")


class Judge:
    """An executor that judges like the probe would: without the context term, rejected."""

    def __init__(self):
        self.jobs = []

    def map(self, jobs, on_result=None):
        self.jobs += jobs
        return [Scored({"global": {}}, loss=0.05) if "k_dc_attn" in p.source
                else Scored({"global": {}}, loss=0.04, reason=SLOPE) for p, _ in jobs]


def run(kind: str, repairs: int):
    cfg = Config()
    cfg.operator.kind, cfg.operator.repairs = kind, repairs
    books = Books(cfg, 1, SimpleNamespace(corpus_version="v0"))
    pool = Judge()
    props = [Proposal(program(0), "llm:mutate", ("p" * 64,)),
             Proposal(program(1), "offline:scale", ("q" * 64,)),
             Proposal(program(2), "llm:crossover", ("p" * 64, "q" * 64))]
    rows = evaluate_children(books, pool, cfg, 3, props, None)
    return cfg, books, pool, rows


def test_rejected_llm_children_are_repaired_as_edges_from_the_llm_program():
    cfg, books, pool, rows = run("llm", 2)
    progs = [r for r in rows if type(r).__name__ == "ProgramRow"]
    evals = [r for r in rows if type(r).__name__ == "Evaluation"]
    llm_ids = [p.id for p in progs[:3] if p.operator.startswith("llm:")]
    fixes = [p for p in progs if p.operator.startswith("repair:")]
    assert len(fixes) == 4  # two LLM children x repairs = 2; the offline one is not repaired
    assert [f.parent_ids for f in fixes] == [[llm_ids[0]]] * 2 + [[llm_ids[1]]] * 2
    assert {f.operator for f in fixes} == {"repair:context_term", "repair:floor_context"}
    kids = [e for e in evals if e.kind == "child"]
    assert [e.status for e in kids[:3]] == ["rejected"] * 3
    assert all(e.status == "accepted" for e in kids[3:]) and len(kids) == 7
    assert [e.operator for e in kids[3:]] == [f.operator for f in fixes]
    # fit seeds: the proposals' positions, then the repairs' after them
    seeds = [s for _, s in pool.jobs]
    assert seeds == [child_seed(cfg.run.seed, 3, i) for i in range(7)]
    assert books.state.n_fitted == 7
    # the reasons are kept for the prompts of the LLM children's parents
    assert books.state.rejections["p" * 64] == [SLOPE, SLOPE]


def test_no_repairs_when_off_or_offline():
    for kind, n in (("llm", 0), ("offline", 2)):
        _, _, pool, rows = run(kind, n)
        assert len(pool.jobs) == 3
        assert not any(getattr(r, "operator", "").startswith("repair:") for r in rows)
