"""``evolve report`` and ``evolve run --report`` end to end: the files, offline-ness,
idempotence, --watch, errors; and the report's champion against the search's own."""

from __future__ import annotations

import math
import re

import pytest

from evolve.archive import Archive
from evolve.cli.main import main
from evolve.report import Options, write_report
from evolve.report.charts import page_name
from evolve.report.data import load_run
from evolve.report.pick import champion

EXTERNAL = re.compile(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:|//|ftp:)""", re.I)


def _pages(out):
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))


def test_run_with_report_writes_every_page(tiny_run):
    archive, out = tiny_run
    with Archive(archive, create=False) as ar:
        data = load_run(ar)
    assert data.run.status == "finished"
    want = {"index.html", "frontier.html", "lineage.html", "validation.html"}
    want |= {page_name(pid) for pid in data.programs}
    assert set(_pages(out)) == want  # offline operator: no LLM page
    assert f"generation {data.run.generations_done}" in (out / "index.html").read_text()


def test_pages_make_no_external_requests(tiny_run, synthetic_archive, tmp_path):
    write_report(synthetic_archive, tmp_path / "s")
    for out in (tiny_run[1], tmp_path / "s"):
        for name in _pages(out):
            html = (out / name).read_text()
            assert not EXTERNAL.search(html), name
            assert "<link" not in html and "<script src" not in html and "@import" not in html
            assert "default-src 'none'" in html  # the CSP forbids any fetch


def test_regenerating_changes_nothing_and_watch_returns_on_a_finished_run(
        synthetic_archive, tmp_path, capsys):
    out = tmp_path / "r"
    first = write_report(synthetic_archive, out)
    assert first.changed == first.pages == len(_pages(out))
    assert "llm.html" in _pages(out)
    assert write_report(synthetic_archive, out).changed == 0
    assert main(["report", "--archive", str(synthetic_archive), "--out", str(out),
                 "--watch", "--interval", "0.05"]) == 0
    assert "0 of" in capsys.readouterr().err


def test_validate_dir_pngs_are_embedded(synthetic_archive, tmp_path):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "e2e_cdfs.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    write_report(synthetic_archive, tmp_path / "r", opts=Options(validate_dir=str(tmp_path / "v")))
    html = (tmp_path / "r" / "validation.html").read_text()
    assert 'src="data:image/png;base64,' in html and "e2e_cdfs.png" in html
    assert "Which program these plots show is not recorded" in html


def test_validate_dir_plots_of_another_program_are_said(synthetic_archive, tmp_path):
    """Plots of another program beside the pick's table would mislead: the page says so,
    and says nothing when they are the pick's."""
    import json

    from evolve.report.data import open_run
    from evolve.report.validation import constants_digest

    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "e2e_cdfs.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    data = open_run(synthetic_archive)
    pick = data.pick_id()
    assert pick
    mine = constants_digest(data.programs[pick].constants)
    for pid, digest, said in (("ab" * 32, mine, "program abababababab, which is neither"),
                              (pick, "0" * 16, "at other constants"), (pick, mine, None)):
        (tmp_path / "v" / "plots.json").write_text(json.dumps({"program": pid,
                                                               "constants": digest}))
        write_report(synthetic_archive, tmp_path / "r",
                     opts=Options(validate_dir=str(tmp_path / "v")))
        html = (tmp_path / "r" / "validation.html").read_text()
        assert (said in html) if said else "These plots are of" not in html
        assert "not recorded" not in html


def test_bad_input_is_one_line_exit_2(tmp_path, synthetic_archive, capsys):
    assert main(["report", "--archive", str(tmp_path / "none.db"), "--out",
                 str(tmp_path / "o")]) == 2
    assert main(["report", "9", "--archive", str(synthetic_archive), "--out",
                 str(tmp_path / "o")]) == 2
    (tmp_path / "junk.db").write_bytes(b"not an archive" * 100)
    assert main(["report", "--archive", str(tmp_path / "junk.db"), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "archive not found" in err[0] and "no run 9" in err[1]
    assert "not an evolve archive" in err[2]
    assert not (tmp_path / "o").exists()  # nothing written for a bad archive or run
    for flag, path, needle in (("--validate-dir", "nothere", "not a directory"),
                               ("--cassette", "nothere.jsonl", "file not found")):
        assert main(["report", "--archive", str(synthetic_archive), "--out",
                     str(tmp_path / "o"), flag, str(tmp_path / path)]) == 2
        assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_champion_agrees_with_the_search(tiny_run):
    from evolve.search.grid import Elite
    from evolve.search.selection import champion as search_champion

    with Archive(tiny_run[0], create=False) as ar:
        data = load_run(ar)
    cells = data.grids[max(data.grids)]
    elites = [Elite(c.program_id, c.loss, c.complexity, c.n_features, c.elite_generation,
                    data.programs[c.program_id].val_loss) for c in cells]
    tol = float(data.config["search"]["pick_tolerance"])
    want = search_champion(elites, tol)
    assert want is not None and champion(data) == want.program_id
    assert not math.isnan(data.programs[want.program_id].val_loss)


@pytest.mark.parametrize("page", ["index.html", "frontier.html", "lineage.html"])
def test_pages_name_the_pick(tiny_run, page):
    with Archive(tiny_run[0], create=False) as ar:
        pick = load_run(ar).pick_id()
    assert pick and pick[:12] in (tiny_run[1] / page).read_text()


def test_a_reused_out_keeps_no_page_of_another_run(tiny_run, synthetic_archive, tmp_path):
    """Found in review: another archive's program pages stayed in `p/`, reachable."""
    out = tmp_path / "mix"
    write_report(synthetic_archive, out)  # an LLM run, more programs
    second = write_report(tiny_run[0], out)
    assert second.pages == len(_pages(out))  # every file is a page of this report
    assert "llm.html" not in _pages(out)
