"""The report's test figures: closed loop from the run's end, or none (issue 57 item 7).

A run's stored test metrics are teacher forced on its corpora (on a queueing run every
program gets the corpora's queue), so the frontier and validation pages show only the
closed-loop figures the run's end computed (``evolve.archive.final_scores``), and an
archive written before them (no table) shows none, saying why.
"""

from __future__ import annotations

import sqlite3

import pytest
from report_synthetic import make_archive

from evolve.archive import Archive, final_scores
from evolve.report.data import load_run, split_loss
from evolve.report.frontier import build_frontier
from evolve.report.site import build_site
from evolve.report.validation import build_validation


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    d = tmp_path_factory.mktemp("finals")
    with_f = make_archive(d / "with.db", n_programs=30, generations=3)
    old = make_archive(d / "old.db", n_programs=30, generations=3, finals=False)
    return with_f, old


def _load(path):
    with Archive(path, create=False) as ar:
        return load_run(ar)


def test_programs_carry_their_closed_loop_test_figures(archives):
    data = _load(archives[0])
    hall = {r.program_id for r in data.frontier()}
    for p in data.programs.values():
        if p.id in hall:
            assert p.test_closed_loop and all(m["mode"] == final_scores.MODE
                                              for m in p.test_closed_loop.values())
            assert p.test_loss == pytest.approx(split_loss(p.test_closed_loop, "test"))
            assert p.test_loss != pytest.approx(split_loss(p.metrics, "test"))
        else:
            assert p.test_closed_loop is None


def test_figures_of_a_refitted_evaluation_are_not_shown(archives, tmp_path):
    """A figure belongs to the evaluation it simulated: once another evaluation of the
    program is its latest (a resumed run refitted it), the figure is not shown."""
    path = tmp_path / "a.db"
    path.write_bytes(archives[0].read_bytes())
    with Archive(path, create=False) as ar:
        pid = ar.frontier(1)[0].program_id
    con = sqlite3.connect(path)
    con.execute("update final_scores set eval_seq = eval_seq + 1000 where program_id = ?",
                (pid,))
    con.commit()
    con.close()
    data = _load(path)
    assert data.programs[pid].test_closed_loop is None
    assert pid not in build_frontier(data).test


def test_frontier_page_shows_closed_loop_test_columns_or_none(archives, tmp_path):
    data = _load(archives[0])
    fp = build_frontier(data)
    assert set(fp.test) == {m.program_id for m in fp.members}
    build_site(data, tmp_path / "r")
    html = (tmp_path / "r" / "frontier.html").read_text()
    assert "test E2E (closed loop)" in html
    old = _load(archives[1])
    assert build_frontier(old).test == {}
    build_site(old, tmp_path / "o")
    html = (tmp_path / "o" / "frontier.html").read_text()
    assert "test E2E" not in html and "No test figures" in html


def test_validation_page_of_an_old_archive_shows_no_teacher_forced_test_points(archives,
                                                                                 tmp_path):
    old = _load(archives[1])
    vp = build_validation(old, None)
    assert vp.points and not [p for p in vp.points if p.split == "test"]
    assert "teacher forced" not in vp.how
    assert vp.test_note.startswith("No test points")
    build_site(old, tmp_path / "o")
    assert "No test points" in (tmp_path / "o" / "validation.html").read_text()
