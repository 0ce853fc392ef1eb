"""``evolve report --validate``: the pick's whole-run validation in the report (issue 57
item 6), instead of a hint to run ``evolve validate`` and regenerate."""

from __future__ import annotations

import pytest
from report_synthetic import make_archive

from evolve.archive import Archive
from evolve.cli.main import main
from evolve.report.data import load_run
from evolve.report.site import Options, build_site
from evolve.report.validation import WholeRuns


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return make_archive(tmp_path_factory.mktemp("v") / "s.db", n_programs=20, generations=2)


@pytest.mark.parametrize("extra, says", [
    (["--watch"], "not with --watch"), (["--validate-dir", "."], "not with --validate-dir")])
def test_validate_refuses_what_it_replaces(synth, tmp_path, capsys, extra, says):
    assert main(["report", "--archive", str(synth), "--out", str(tmp_path / "r"),
                 "--validate", *extra]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_data_applies_to_validate_only(synth, tmp_path, capsys):
    assert main(["report", "--archive", str(synth), "--out", str(tmp_path / "r"),
                 "--data", "."]) == 2
    assert "--data: applies to --validate only" in capsys.readouterr().err


def test_the_validation_page_shows_the_whole_run_table(synth, tmp_path):
    with Archive(synth, create=False) as ar:
        data = load_run(ar)
    pick = data.pick_id()
    assert pick
    whole = WholeRuns(pick, "per_model", "vllm", ["run", "split", "E2E meas"],
                      [["llama-2-7b-tp1-codegen", "train", "1.234"]],
                      ["train: 1 runs, mean E2E APE median 1.0%"])
    build_site(data, tmp_path / "r", Options(validation=whole))
    html = (tmp_path / "r" / "validation.html").read_text()
    assert 'id="whole-runs"' in html and "llama-2-7b-tp1-codegen" in html
    assert "<li>train: 1 runs, mean E2E APE median 1.0%</li>" in html
    assert "evolve report --validate" in html
    build_site(data, tmp_path / "o")  # without: the page says how to get it
    html = (tmp_path / "o" / "validation.html").read_text()
    assert 'id="whole-runs"' not in html and "Regenerate with" in html


RUNS = ("20260217-155451-llama-2-7b-tp1-codegen", "20260217-170634-llama-2-7b-tp1-reasoning")


@pytest.fixture()
def two_runs(data_path, tmp_path):
    """A data directory of two measured runs (links): validation in seconds."""
    d = tmp_path / "data"
    d.mkdir()
    for part in data_path.iterdir():
        if part.name != "experiments":
            (d / part.name).symlink_to(part.resolve())
    (d / "experiments").mkdir()
    for name in RUNS:
        (d / "experiments" / name).symlink_to((data_path / "experiments" / name).resolve())
    return d


@pytest.mark.slow
def test_report_validate_embeds_the_picks_closed_loop_validation(finished, two_runs,
                                                                  tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "--archive", str(finished), "--out", str(out), "--validate",
                 "--data", str(two_runs)]) == 0
    err = capsys.readouterr().err
    assert "validated on 2 runs" in err
    html = (out / "validation.html").read_text()
    with Archive(finished, create=False) as ar:
        pick = next(r.program_id for r in ar.frontier(1) if r.picked)
        splits = ar.run(1).splits
    assert 'id="whole-runs"' in html and pick[:12] in html
    for full in RUNS:  # each run in the table, labelled with the run's own split
        assert f"<td>{full[16:]}</td><td>{splits.get(full, '')}</td>" in html
    assert html.count("data:image/png;base64,") >= 2  # its plots, embedded
    assert "neither the pick" not in html and "other constants" not in html
