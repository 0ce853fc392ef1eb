"""The data each report page is built from, on a synthetic archive and on a tiny real run.

No HTML here: the builders return plain data, and these tests check that data against the
archive's rows (what a reader of the page is told must be what the archive says).
"""

from __future__ import annotations

import json
import math
import struct
import zlib

import pytest
from report_synthetic import make_archive

from evolve.archive import Archive
from evolve.archive.models import on_frontier
from evolve.report.data import load_run, split_loss
from evolve.report.frontier import build_frontier
from evolve.report.lineage import build_lineage
from evolve.report.llmlog import build_llm_log, load_prompts, verdict_of
from evolve.report.overview import build_overview
from evolve.report.pick import champion, explain
from evolve.report.program import build_program, displacements, run_rows
from evolve.report.validation import build_validation


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    path = make_archive(tmp_path_factory.mktemp("syn") / "s.db", n_programs=80, generations=6)
    with Archive(path, create=False) as ar:
        return load_run(ar)


def test_load_run_links_children_and_recomputes_split_losses(synth):
    progs = synth.programs
    assert len(progs) > 60
    for p in progs.values():
        for c in p.children:
            assert p.id in progs[c].parents
        if p.accepted:
            assert p.metrics and p.constants
            assert p.val_loss == pytest.approx(split_loss(p.metrics, "validate"))
            ape = next(m["ape"] for m in p.metrics.values() if m["split"] == "validate")
            assert p.val_loss == pytest.approx(math.sqrt(
                (ape["e2e_mean"] ** 2 + ape["ttft_mean"] ** 2 + ape["itl_mean"] ** 2) / 3))


def test_split_loss_rules():
    ok = {"a": {"split": "validate", "valid": True,
                "ape": {"e2e_mean": 0.3, "ttft_mean": 0.4, "itl_mean": 0.0}}}
    assert split_loss(ok, "validate") == pytest.approx(math.sqrt((0.09 + 0.16) / 3))
    assert math.isnan(split_loss(ok, "test"))
    bad = {**ok, "b": {"split": "validate", "valid": False, "ape": {}}}
    assert split_loss(bad, "validate") == math.inf


def test_overview_series_follow_the_frontier_rows(synth):
    ov = build_overview(synth)
    assert [r.generation for r in ov.generations] == sorted(synth.frontiers)
    for r in ov.generations:
        front = synth.frontiers[r.generation]
        assert r.frontier_size == sum(on_frontier(front)) <= len(front)
        assert r.best_loss == min(f.loss for f in front)
        assert r.pick_id == next(f.program_id for f in front if f.picked)
        assert r.occupied == len(synth.grids[r.generation])
        # the pick's validate loss as the pick rule read it in that generation, not at the
        # constants of a later refit (found in review)
        with Archive(synth.archive_path, create=False) as ar:
            then = [e for e in ar.evaluations(synth.run.id, program_id=r.pick_id)
                    if e.status == "accepted" and e.generation <= r.generation]
        assert then and r.pick_val_loss == split_loss(then[-1].metrics, "validate")
    assert ov.heat is not None and len(ov.heat.cells) == len(synth.grids[max(synth.grids)])
    facts = dict(ov.facts)
    assert facts["seed"] == "1" and "LLM cost" in facts and facts["operator"].startswith("llm")
    assert ov.pick_id == synth.pick_id()


def test_frontier_page_has_one_point_per_member_and_one_pick(synth):
    fp = build_frontier(synth)
    front = synth.frontier()  # the stored hall of fame
    assert sorted(p.program_id for p in fp.frontier_points) == sorted(
        f.program_id for f, on in zip(front, on_frontier(front), strict=True) if on)
    assert [p.program_id for p in fp.points if p.pick] == [synth.pick_id()]
    accepted = {p.id for p in synth.programs.values() if p.accepted}
    assert {p.program_id for p in fp.points} == accepted
    by_id = {p.program_id: p for p in fp.points}
    for f in front:  # entries sit at the coordinates the frontier was built on
        assert (by_id[f.program_id].complexity, by_id[f.program_id].train_loss) == (
            f.complexity, f.loss)


def test_the_pick_explanation_matches_the_stored_pick(synth):
    members, why = explain(synth)
    picked = [m for m in members if m.picked]
    assert len(picked) == 1 and picked[0].program_id == synth.pick_id()
    eligible = [m for m in members if m.eligible]
    assert picked[0].val_loss == min(m.val_loss for m in eligible)  # rule "validate"
    assert "validate loss" in why and "test" in why
    lowest = min(m.train_loss for m in members)
    assert all(m.eligible == (m.train_loss <= 1.5 * lowest) for m in members)
    # the hall of fame holds dominated entries too; PySR's score is for frontier members
    assert [m.complexity for m in members] == sorted({m.complexity for m in members})
    assert any(not m.on_frontier for m in members)
    assert all(math.isnan(m.score) != m.on_frontier for m in members)


def test_program_page_data(synth):
    disp = displacements(synth)
    child = next(p for p in synth.programs.values() if p.parents and p.accepted)
    page = build_program(synth, child.id, displaced=disp)
    assert [e.program_id for e in page.parents] == list(dict.fromkeys(child.parents))
    assert all(e.operator == child.operator for e in page.parents)
    assert page.diffs and page.diffs[0][0] == child.parents[0]
    assert any(d.kind in ("add", "del") for d in page.diffs[0][1])
    assert [r.split for r in page.runs] == sorted((r.split for r in page.runs),
                                                 key=["train", "validate", "test"].index)
    assert len(page.const_rows) == 3 and "per_step_us" in page.const_names
    seed = next(p for p in synth.programs.values() if not p.parents)
    sp = build_program(synth, seed.id, displaced=disp)
    assert "seed" in sp.roles and not sp.parents
    assert {c.program_id for c in sp.children} == set(seed.children)


def test_displacements_name_the_elite_each_program_replaced(synth):
    disp = displacements(synth)
    holder: dict[str, str] = {}
    for g in sorted(synth.grids):
        for c in synth.grids[g]:
            if holder.get(c.cell) != c.program_id:
                d = next(x for x in disp[c.program_id] if x.cell == c.cell and x.generation == g)
                assert d.previous_id == holder.get(c.cell)
            holder[c.cell] = c.program_id


def test_lineage_reaches_the_seeds_and_marks_one_jump(synth):
    lin = build_lineage(synth)
    assert lin.targets and lin.targets[0][1] == synth.pick_id()
    for pid in lin.nodes:
        parents = synth.programs[pid].parents
        assert all(q in lin.nodes for q in parents)  # every ancestor is drawn
        if not parents:
            assert synth.programs[pid].kind == "seed"
    assert any(not synth.programs[pid].parents for pid in lin.nodes)
    assert sum(e.jump for e in lin.edges) <= 1
    for e in lin.edges:
        assert e.parent in synth.programs[e.child].parents
        assert e.operator == synth.programs[e.child].operator
    jumps = [e for e in lin.edges if e.jump]
    if jumps:
        assert jumps[0].ratio == min(e.ratio for e in lin.edges if math.isfinite(e.ratio))


def test_llm_log_pairs_every_call_with_its_proposal(synth, tmp_path):
    log = build_llm_log(synth)
    assert len(log) == len(synth.llm_calls) > 0
    assert all(x.verdict != "unmatched" for x in log)
    for x in log:
        p = synth.programs[x.program_id]
        assert p.operator.startswith("llm:") and p.generation == x.generation
        assert x.verdict == ("accepted" if p.accepted else "does not parse")
        assert p.source.strip()[:40] in x.reply
        assert x.prompt is None
    cas = tmp_path / "c.jsonl"
    h = synth.llm_calls[0].request_hash
    entry = {"format": 1, "hash": h, "exchange": {},
             "request": {"messages": [{"role": "user", "content": "improve this"}]}}
    cas.write_text(json.dumps(entry) + "\nnot json\n")
    assert load_prompts(cas)[h][0]["content"] == "improve this"
    assert build_llm_log(synth, cas)[0].prompt == [{"role": "user", "content": "improve this"}]


def test_verdict_classes():
    from evolve.report.data import EvalBrief

    def ev(status, reason):
        return EvalBrief(1, 0, "x", "screen", "llm:mutate", status, None, reason, 0)

    assert verdict_of(ev("accepted", ""), "ok") == "accepted"
    assert verdict_of(ev("rejected", "duplicate of program ab"), "ok") == "duplicate"
    assert verdict_of(ev("rejected", "no program found"), "no_program") == "no program"
    assert verdict_of(ev("rejected", "timeout"), "error") == "call failed"
    assert verdict_of(None, "ok") == "unmatched"


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b""))


def test_validation_page_data(synth, tmp_path):
    (tmp_path / "pred_vs_measured.png").write_bytes(_png())
    vp = build_validation(synth, tmp_path)
    pick = synth.pick_id()
    assert vp.targets[0][1] == pick
    mine = [p for p in vp.points if p.program_id == pick]
    assert {p.split for p in mine} == {"train", "validate", "test"}
    assert len(mine) == 2 * len(synth.programs[pick].metrics)
    assert [i.name for i in vp.images] == ["pred_vs_measured.png"]
    assert vp.images[0].data_uri.startswith("data:image/png;base64,")
    assert build_validation(synth, None).images == []
    # how the metrics were scored is read from them, per split (a fixed caption was untrue)
    modes = {m["split"]: m["mode"] for m in synth.programs[pick].metrics.values()}
    assert vp.how.startswith("train: ") and "test: " in vp.how
    # test points: the run's end-of-run closed-loop figures, never the teacher-forced ones
    assert "teacher_forced" in modes.values() and "teacher forced" not in vp.how
    assert "test: closed loop on the whole run, at the end of the run" in vp.how
    final = synth.programs[pick].test_closed_loop
    assert {(p.run, p.predicted) for p in mine if p.split == "test"} == {
        (n, m["pred"][k]) for n, m in final.items() for k in ("e2e_mean", "ttft_mean")}
    assert vp.test_note == ""


def test_run_rows_keep_measured_predicted_and_ape():
    rows = run_rows({"r@0-1s": {"split": "test", "mode": "teacher_forced", "valid": True,
                                "pred": {"e2e_mean": 2.0, "failures": 1.0},
                                "meas": {"e2e_mean": 1.0, "failures": 0.0},
                                "ape": {"e2e_mean": 1.0}}})
    assert rows[0].cells[0] == (1.0, 2.0, 1.0) and rows[0].failures == (1.0, 0.0)
    assert rows[0].cells[1] == (None, None, None)


def test_an_empty_run_builds(tmp_path):
    with Archive(tmp_path / "e.db") as ar:
        ar.create_run(1, {}, {}, None)
        data = load_run(ar)
    assert build_overview(data).generations == []
    assert build_frontier(data).points == [] and champion(data) is None
    assert build_lineage(data).nodes == {} and build_llm_log(data) == []
