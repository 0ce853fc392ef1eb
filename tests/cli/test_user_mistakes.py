"""Mistakes a user makes with archives, configs and flags (found by a fresh-eyes session):
one line, exit 2, never an internal error, and a budget that cannot mean anything is
refused instead of "finishing" a run that did nothing."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from evolve.cli.main import main


def _line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err, err
    return err


@pytest.mark.parametrize("command", [["frontier"], ["runs"], ["report", "--out", "R"]])
def test_an_archive_that_is_a_directory(tmp_path, capsys, command):
    argv = [a.replace("R", str(tmp_path / "r")) for a in command]
    assert main([*argv, "--archive", str(tmp_path)]) == 2
    assert f"{tmp_path}: a directory, not an archive file" in _line(capsys)


def test_a_blank_archive_in_the_config(tmp_path, capsys):
    cfg = tmp_path / "a.toml"
    cfg.write_text('[run]\narchive = ""\n')
    assert main(["run", "--config", str(cfg), "--generations", "1"]) == 2
    assert "a directory, not an archive file" in _line(capsys)


@pytest.mark.parametrize("command", [["runs"], ["frontier"], ["show", "abc"]])
def test_read_only_commands_leave_an_empty_database_alone(tmp_path, capsys, command):
    """A SQLite file with no tables (someone's, or an archive not yet begun) is refused;
    the commands once wrote evolve's schema into it."""
    db = tmp_path / "empty.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 1")  # a valid database file with no tables
    con.commit()
    con.close()
    before = db.read_bytes()
    assert main([*command, "--archive", str(db)]) == 2
    assert f"{db}: no archive yet (an empty database;" in _line(capsys)
    assert db.read_bytes() == before


def test_report_names_an_empty_archive_as_empty(tmp_path, capsys):
    (tmp_path / "zero.db").write_bytes(b"")
    assert main(["report", "--archive", str(tmp_path / "zero.db"), "--out",
                 str(tmp_path / "r")]) == 2
    assert "an empty file, no archive yet" in _line(capsys)


@pytest.mark.real_data
@pytest.mark.parametrize("column", ["metrics", "constants"])
@pytest.mark.parametrize("command", [["frontier"], ["show", "ID"], ["export-go", "ID"]])
def test_a_damaged_json_value_in_the_archive(finished, tmp_path, capsys, column, command):
    con = sqlite3.connect(finished)
    pid = con.execute("SELECT program_id FROM frontier LIMIT 1").fetchone()[0]
    con.execute(f"UPDATE evaluations SET {column} = '{{not json'")
    con.commit()
    con.close()
    argv = [pid[:12] if a == "ID" else a for a in command]
    assert main([*argv, "--archive", str(finished)]) == 2
    assert f"archive's evaluations.{column} holds a value that is not JSON ('{{not json')" \
        in _line(capsys)


@pytest.mark.real_data
@pytest.mark.parametrize("command", [["frontier"], ["show", "ID"], ["export-go", "ID"]])
def test_constants_that_are_not_numbers_in_the_archive(finished, tmp_path, capsys, command):
    """An edited constant once reached a number format or the Go exporter as text (an
    internal error): now the archive refuses it on reading, naming the column and entry."""
    con = sqlite3.connect(finished)
    pid = con.execute("SELECT program_id FROM frontier LIMIT 1").fetchone()[0]
    con.execute("""UPDATE evaluations SET constants = '{"global":{"k0":"fast"}}'
                   WHERE constants IS NOT NULL""")
    con.commit()
    con.close()
    argv = [pid[:12] if a == "ID" else a for a in command]
    assert main([*argv, "--archive", str(finished)]) == 2
    assert ("the archive's evaluations.constants holds constant 'k0' of group 'global' as "
            "'fast', not a number") in _line(capsys)


@pytest.mark.parametrize(("toml", "needle"), [
    ("[run]\nmax_evaluations = -1\n", "'run.max_evaluations' out of range: must be an "
                                      "integer >= 0"),
    ("[search]\nmax_refreshes = -3\n", "'search.max_refreshes' out of range"),
    ("[fit]\npolish_evals = -1\n", "'fit.polish_evals' out of range"),
    ("[search]\nrefresh_margin = nan\n", "'search.refresh_margin' out of range: must be a "
                                         "finite number >= 0"),  # NaN: never refreshed
    ("[search]\nrefresh_margin = -0.5\n", "'search.refresh_margin' out of range"),
    ("[search]\ncomplexity_edges = [-10, -5]\n", "'search.complexity_edges' out of range"),
])
def test_budgets_and_counts_below_zero(tmp_path, capsys, toml, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    assert main(["run", "--config", str(cfg), "--print-config"]) == 2
    assert needle in _line(capsys)


def test_a_config_saved_with_a_byte_order_mark(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"\xef\xbb\xbf[run]\nseed = 3\n")
    assert main(["run", "--config", str(cfg), "--print-config"]) == 2
    assert "starts with a UTF-8 byte-order mark" in _line(capsys)


@pytest.mark.real_data
def test_a_seeds_dir_that_is_not_a_directory(tmp_path, capsys):
    """Said as such (it once read "no seed programs", as for an empty folder)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[run]\nseeds_dir = "{tmp_path / "nope"}"\nhead_seconds = 5.0\n'
                   'scenarios = ["20260217-155451-llama-2-7b-tp1-codegen"]\n')
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "a.db")]) == 2
    assert f"{tmp_path / 'nope'}: not a directory (run.seeds_dir" in _line(capsys)
    (tmp_path / "empty").mkdir()
    cfg.write_text(cfg.read_text().replace("nope", "empty"))
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "b.db")]) == 2
    assert f"{tmp_path / 'empty'}: no seed programs (*.py)" in _line(capsys)


@pytest.mark.real_data
def test_a_scenario_the_data_lacks_is_named_with_its_key(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[run]\nscenarios = ["20260217-155451-llama-2-7b-tp1-codegen", "nope"]\n')
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "a.db")]) == 2
    assert "run.scenarios: no experiment named 'nope' in " in _line(capsys)


def test_a_missing_data_directory_is_blamed_on_its_source(tmp_path, capsys):
    """run.data of a config file is named as such, not as --data the user never gave;
    --data given on the command line wins over the file and is named as the flag."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[run]\ndata = "{tmp_path / "gone"}"\n')
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "a.db")]) == 2
    line = _line(capsys)
    assert line.startswith(f"evolve run: error: {cfg}: key 'run.data': {tmp_path / 'gone'}: "
                           "data directory not found"), line
    assert "--data" not in line
    assert main(["run", "--config", str(cfg), "--data", str(tmp_path / "also"),
                 "--archive", str(tmp_path / "a.db")]) == 2
    line = _line(capsys)
    assert f"{tmp_path / 'also'}: data directory not found" in line and "run.data" not in line
    assert not (tmp_path / "a.db").exists()


def test_a_stored_run_whose_data_directory_moved(finished, tmp_path, capsys):
    """--resume names the stored run's run.data and says how to point at the new place."""
    import json

    con = sqlite3.connect(finished)
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE id = 1").fetchone()[0])
    cfg["run"]["data"] = str(tmp_path / "moved")
    con.execute("UPDATE runs SET config = ? WHERE id = 1", (json.dumps(cfg),))
    con.commit()
    con.close()
    assert main(["run", "--resume", "1", "--archive", str(finished)]) == 2
    assert (f"{finished} run 1: key 'run.data': {tmp_path / 'moved'}: data directory not "
            "found; pass --data DIR if it moved") in _line(capsys)


def _data_without(tmp_path, data_path, drop: str):
    """A data directory holding the bundled runs but ``drop`` (symlinks, nothing copied)."""
    root = tmp_path / "data"
    (root / "experiments").mkdir(parents=True)
    for entry in data_path.iterdir():
        if entry.name != "experiments":
            (root / entry.name).symlink_to(entry.resolve())
    for exp in (data_path / "experiments").iterdir():
        if exp.name != drop:
            (root / "experiments" / exp.name).symlink_to(exp.resolve())
    return root


@pytest.mark.real_data
@pytest.mark.parametrize("command", [["replay", "ID"], ["run", "--resume", "1"]])
def test_data_without_a_stored_runs_scenario(finished, tmp_path, capsys, data_path, command):
    """replay once ended in a KeyError from the physics probes; both name the run. The
    stored run is made one over every run of its data directory (no run.scenarios), as a
    user's is, so that no list of names catches the gap first."""
    import json

    from hardening_helpers import SCENARIOS

    con = sqlite3.connect(finished)
    pid = con.execute("SELECT program_id FROM frontier LIMIT 1").fetchone()[0]
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE id = 1").fetchone()[0])
    cfg["run"]["scenarios"] = []
    con.execute("UPDATE runs SET config = ? WHERE id = 1", (json.dumps(cfg),))
    con.commit()
    con.close()
    other = _data_without(tmp_path, data_path, SCENARIOS[0])
    argv = [pid[:12] if a == "ID" else a for a in command]
    assert main([*argv, "--archive", str(finished), "--data", str(other)]) == 2
    assert (f"run 1 used scenario {SCENARIOS[0]!r}, not in the data (1 of "
            f"{len(SCENARIOS)} missing; pass --data DIR)") in _line(capsys)


def test_a_blank_llm_model_is_not_the_offline_operator(tmp_path, capsys):
    """`--llm "$MODEL"` with MODEL unset once ran the offline operator without a word."""
    assert main(["run", "--llm", " ", "--archive", str(tmp_path / "a.db")]) == 2
    assert "--llm: blank; name the endpoint's model" in _line(capsys)
    assert not (tmp_path / "a.db").exists()


def test_an_llm_operator_without_a_model(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[operator]\nkind = "llm"\n')
    assert main(["run", "--config", str(cfg), "--archive", str(tmp_path / "a.db")]) == 2
    assert 'operator.kind = "llm" needs a model' in _line(capsys)
    assert not (tmp_path / "a.db").exists()


def test_report_watch_interval_must_be_finite(tmp_path, capsys):
    assert main(["report", "--interval", "nan", "--archive", str(tmp_path / "a.db")]) == 2
    assert "--interval nan: must be a finite number > 0" in _line(capsys)


def test_a_blank_data_directory_variable(monkeypatch, capsys):
    monkeypatch.setenv("EVOLVE_DATA", " ")
    assert main(["data"]) == 2
    assert "EVOLVE_DATA: blank" in _line(capsys)


def test_report_legend_names_the_llm_only_for_llm_runs(finished, tmp_path):
    from evolve.report import write_report

    write_report(finished, tmp_path / "r")
    assert "from the LLM" not in (tmp_path / "r" / "frontier.html").read_text()
    shutil.rmtree(tmp_path / "r")


@pytest.mark.parametrize("argv, needle", [
    (["--seeds", "1", "-5"], "--seeds -5: out of range, each seed must be an integer in "
                             "[0, 2^63)"),  # only the first seed was checked, by a run
    (["--workers", "0"], "--workers 0: must be an integer >= 1"),
    (["--parallel", "0"], "--parallel 0: must be an integer >= 1"),
    (["--ray-address", "10.0.0.1:6379"], "--ray-address: applies to --executor ray"),
    (["--out", ""], "--out: blank; name the study's directory"),  # was the current dir
])
def test_study_flags_are_refused_before_any_seed(tmp_path, monkeypatch, capsys, argv,
                                                  needle):
    monkeypatch.chdir(tmp_path)
    out = [] if "--out" in argv else ["--out", str(tmp_path / "s")]
    assert main(["study", "--generations", "0", *out, *argv]) == 2
    assert needle in _line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, needle", [
    (["--llm", " "], "--llm: blank"),  # was sent to the endpoint as the model
    (["--llm", "m", "--llm-base-url", ""], "--llm-base-url: blank"),  # was the default URL
    (["--llm", "m", "--api-key-env", ""], "--api-key-env: blank"),
    (["--llm", "m", "--timeout", "1e300"], "--timeout 1e+300: must be a number of seconds "
                                           "in (0, 3600]"),  # an OverflowError in socket
])
def test_llm_check_blank_flags_and_a_huge_timeout(capsys, argv, needle):
    assert main(["llm-check", "--llm-base-url", "http://127.0.0.1:9/v1", *argv]) == 2
    assert needle in _line(capsys)


@pytest.mark.parametrize("argv, needle", [
    (["--out", ""], "--out: blank; name the output directory"),  # was runs/calibrate-NAME
    (["--name", ""], "--name: blank; name the model"),  # was the config's directory name
    (["--kv-blocks", "1" + "0" * 21], "--kv-blocks 1" + "0" * 21 + ": out of range, must "
                                      "be below 2^31"),  # an OverflowError in the simulator
])
def test_calibrate_refuses_blank_and_huge_values_before_the_work(
        tmp_path, monkeypatch, capsys, argv, needle):
    import evolve.cli.commands.calibrate as calibrate

    def no_work(_args):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(calibrate, "load_target", no_work)
    (tmp_path / "m").mkdir()
    assert main(["calibrate", "linear", "--model-config", str(tmp_path / "m"),
                 "--max-evals", "20", *argv]) == 2
    assert needle in _line(capsys)


def test_calibrate_checks_its_out_before_loading_anything(tmp_path, monkeypatch, capsys):
    """--out under a file was found after the data and the KV estimate (seconds), and a
    refused calibration must leave no directory behind."""
    import evolve.cli.commands.calibrate as calibrate
    from evolve.errors import UserError

    def no_work(_args):
        raise UserError("the target was loaded")

    monkeypatch.setattr(calibrate, "load_target", no_work)
    (tmp_path / "file").write_text("")
    argv = ["calibrate", "linear", "--model-config", str(tmp_path), "--out"]
    assert main([*argv, str(tmp_path / "file" / "x")]) == 2
    assert f"{tmp_path / 'file'} exists and is not a directory" in _line(capsys)
    assert main([*argv, str(tmp_path / "new" / "x")]) == 2
    assert "the target was loaded" in _line(capsys)
    assert not (tmp_path / "new").exists()


def test_fit_checks_prior_and_save_constants_before_simulating(tmp_path, monkeypatch,
                                                               capsys):
    """--prior nan was refused only after every run was simulated; --save-constants ""
    fitted and saved nothing without a word; a directory was "no such file"."""
    import evaluator.api

    def no_work(*_a, **_k):
        raise AssertionError("the runs were loaded")

    monkeypatch.setattr(evaluator.api, "load_scenarios", no_work)
    assert main(["fit", "linear", "--prior", "nan"]) == 2
    assert "--prior nan: must be a finite number >= 0" in _line(capsys)
    assert main(["fit", "linear", "--save-constants", ""]) == 2
    assert "--save-constants: blank; name the JSON file to write" in _line(capsys)
    assert main(["fit", str(tmp_path)]) == 2
    assert f"{tmp_path}: a directory, not a program file" in _line(capsys)


def test_fit_on_data_without_train_runs_names_the_directory(tmp_path, capsys):
    (tmp_path / "experiments").mkdir()
    assert main(["fit", "linear", "--data", str(tmp_path)]) == 2
    assert f"{tmp_path}: no run has split 'train'" in _line(capsys)


@pytest.mark.parametrize("argv, needle", [
    (["--scope", "pooled"], "--scope pooled: not used when the held-out model is calibrated "
                            "to `layered`"),  # ignored without a word
    (["--polish-evals", "0"], "--polish-evals 0: not used when the held-out model is "
                              "calibrated to `layered`"),  # ignored too (documented only)
    (["--unseen", "global", "--scope", "per_model"], "--scope per_model: --mode lomo holds "
                                                     "out a whole model"),  # declared values
])
def test_generalize_lomo_scopes_that_mean_nothing(monkeypatch, capsys, argv, needle):
    import evaluator.api

    def no_work(*_a, **_k):
        raise AssertionError("the runs were loaded")

    monkeypatch.setattr(evaluator.api.Evaluator, "from_data", no_work)
    assert main(["generalize", "linear", "--mode", "lomo", *argv]) == 2
    assert needle in _line(capsys)


def test_study_passes_head_seconds_zero_on(tmp_path):
    """--head-seconds 0 (whole runs) was dropped, so a config's cut applied silently."""
    import argparse

    from evolve.cli.commands import study

    parser = argparse.ArgumentParser()
    study.add_arguments(parser)
    args = parser.parse_args(["--seeds", "1", "--head-seconds", "0", "--config", "c.toml"])
    argv = study._run_argv(args, 1, str(tmp_path / "a.db"), "")
    assert argv[argv.index("--head-seconds") + 1] == "0.0"
