"""Commands given bad programs, bad paths and bad settings: one line, exit 2, and before
the work (issue 17, items 7 and 8)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from evolve.cli.main import main
from evolve.errors import UserError

HUGE = "9" * 400
NEGATIVE_QUEUE = '''CONSTANTS = {"a": (1000.0, 1.0, 10000.0)}

def step_time(f, c):
    return c.a + f.batch_size

def queueing_time(r, c):
    return 0.0 - c.a
'''
NAN_STEP = '''CONSTANTS = {"a": (1000.0, 1.0, 10000.0)}

def step_time(f, c):
    return c.a * log(f.batch_size - f.batch_size)
'''

# positive on small batches, negative from 5 requests on: the simulation stops there, and
# its cut-off corpus is no batches to fit on
NEGATIVE_STEP = '''CONSTANTS = {"a": (20000.0, 1.0, 40000.0), "b": (4900.0, 0.0, 9000.0)}

def step_time(f, c):
    return c.a - c.b * f.batch_size
'''


def _one_line(capsys) -> str:
    """The one error line (progress lines of ``fit`` may precede it)."""
    text = capsys.readouterr().err
    err = [ln for ln in text.splitlines() if ln.startswith("evolve ")]
    assert len(err) == 1 and "Traceback" not in text, text
    return err[0]


@pytest.mark.real_data
@pytest.mark.parametrize("text, needle", [
    (NEGATIVE_QUEUE, "queueing_time is not finite and non-negative"),
    (NAN_STEP, "step_time is -inf us on the batch"),
    (NEGATIVE_STEP, "step time not finite, positive and below 1e+12 us at step"),
])
def test_fit_says_what_is_wrong_with_the_program(tmp_path, capsys, text, needle):
    path = tmp_path / "p.py"
    path.write_text(text)
    assert main(["fit", str(path), "--head-seconds", "5"]) == 2
    line = _one_line(capsys)
    assert needle in line and str(path) in line


@pytest.mark.real_data
@pytest.mark.parametrize("command", [["replay"], ["validate", "--no-plots"], ["export-go"],
                                     ["show"]])
def test_an_edited_stored_source_is_refused(finished, command, capsys):
    """Issue 56: an edited source no longer hashes to its id; every command that uses
    a stored source refuses it (show once printed it as that program)."""
    con = sqlite3.connect(finished)
    pid = con.execute("SELECT program_id FROM frontier LIMIT 1").fetchone()[0]
    con.execute("UPDATE programs SET source = source || ' + " + HUGE + "' WHERE id = ?",
                (pid,))
    con.commit()
    con.close()
    code = main([command[0], pid[:12], "--archive", str(finished), *command[1:]])
    assert code == 2
    line = _one_line(capsys)
    assert f"stored program {pid[:12]}: its source does not hash to its id" in line


def test_a_stored_source_that_no_longer_passes_the_checker():
    """The language changed under an archive: its id still matches, the checker refuses."""
    from evolve.archive.ids import source_id
    from evolve.workflows.targets import parse_stored

    src = 'CONSTANTS = {"a": (1.0, 0.0, 10.0)}\n\ndef step_time(f, c):\n    return c.a + ' \
        + HUGE + "\n"
    with pytest.raises(UserError, match=r"stored program [0-9a-f]{12} no longer passes"):
        parse_stored(src, source_id(src), "archive a.db")


@pytest.mark.real_data
def test_export_go_to_a_missing_directory_fails_before_the_work(finished, capsys):
    assert main(["export-go", "0", "--archive", str(finished), "-o",
                 "/nonexistent_dir/x.go"]) == 2
    assert "/nonexistent_dir does not exist" in _one_line(capsys)


@pytest.mark.real_data
def test_export_go_under_a_file_says_it_is_not_a_directory(finished, tmp_path, capsys):
    (tmp_path / "x.go").write_text("")
    assert main(["export-go", "0", "--archive", str(finished), "-o",
                 str(tmp_path / "x.go" / "y.go")]) == 2
    assert f"{tmp_path / 'x.go'} is not a directory" in _one_line(capsys)


@pytest.mark.real_data
def test_validate_to_an_unwritable_out_fails_before_the_work(finished, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    t0 = time.monotonic()
    assert main(["validate", "0", "--archive", str(finished), "--out",
                 str(blocker / "plots")]) == 2
    assert "--out" in _one_line(capsys)
    assert time.monotonic() - t0 < 5  # nothing was simulated


@pytest.mark.real_data
def test_validate_with_a_host_floor_that_is_not_one_says_so(finished, capsys):
    assert main(["validate", "0", "--archive", str(finished), "--no-plots",
                 "--host-floor", "fast"]) == 2
    assert "--host-floor: 'measured' or a finite number of µs >= 0 (got 'fast')" in \
        _one_line(capsys)


CODEGEN = "20260217-155451-llama-2-7b-tp1-codegen"
WRITERS = {  # command -> its argv with OUT where it writes
    "report": ["report", "--archive", "{archive}", "--out", "OUT"],
    "study": ["study", "--seeds", "1", "--generations", "0", "--out", "OUT"],
    "export-trace": ["export-trace", CODEGEN, "--out", "OUT"],
    "fit": ["fit", "layered", "--save-constants", "OUT", "--max-evals", "10"],
    "export-go": ["export-go", "0", "--archive", "{archive}", "-o", "OUT"],
    "calibrate": ["calibrate", "linear", "--model-config", "{data}/models/Llama-2-7b-hf",
                  "--max-evals", "20", "--out", "OUT"],
    "run --report": ["run", "--generations", "1", "--archive", "{tmp}/r.db", "--report",
                     "OUT"],
    "run --cassette": ["run", "--generations", "1", "--archive", "{tmp}/r.db", "--llm", "m",
                       "--llm-base-url", "http://127.0.0.1:9/v1", "--cassette", "OUT",
                       "--record"],
    "ingest": ["ingest", "{data}/experiments/" + CODEGEN, "--hardware", "H100",
               "--model", "{data}/models/Llama-2-7b-hf", "--out", "OUT"],
}


@pytest.mark.real_data
@pytest.mark.parametrize("where", ["under-a-file", "proc"])
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_an_output_that_cannot_be_written_fails_before_the_work(
        finished, data_path, tmp_path, capsys, command, where):
    """Root passes ``os.access`` for /proc and read-only mounts: the check must write."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = str(blocker / "x") if where == "under-a-file" else "/proc/evolve-test-out"
    argv = [a.replace("OUT", out).format(archive=finished, data=data_path, tmp=tmp_path)
            for a in WRITERS[command]]
    t0 = time.monotonic()
    assert main(argv) == 2
    line = _one_line(capsys)
    assert out in line or str(blocker) in line, line
    assert time.monotonic() - t0 < 10  # refused before fitting, simulating or searching
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("make", ["directory", "latin-1"])
def test_a_config_that_is_a_directory_or_not_utf8(tmp_path, make, capsys):
    path = tmp_path / "c.toml"
    if make == "directory":
        path.mkdir()
    else:
        path.write_bytes("[run]\nseed = 1 # caf\xe9\n".encode("latin-1"))
    assert main(["run", "--config", str(path), "--archive", str(tmp_path / "a.db")]) == 2
    line = _one_line(capsys)
    assert str(path) in line and ("directory" in line or "UTF-8" in line)
    assert not (tmp_path / "a.db").exists()


def test_workers_are_capped_at_the_cpu_count_unless_forced(tmp_path, capsys):
    # --print-config: checked like a run, but a checker that lets it through forks nothing
    assert main(["run", "--workers", "4096", "--print-config"]) == 2
    line = _one_line(capsys)
    assert "run.workers' out of range: must be an integer in [1, " in line
    assert "--force-workers" in line
    assert main(["run", "--workers", "64", "--force-workers", "--print-config"]) == 0
    assert "workers = 64" in capsys.readouterr().out


@pytest.mark.parametrize("argv, toml, needle", [
    (["--wall-time", "-5"], "", "run.wall_time_s' out of range: must be a finite number >= 0"),
    ([], "[fit]\nslice_seconds = nan\n", "fit.slice_seconds' out of range: must be a finite"),
    ([], "[search]\nchildren = 0\n", "search.children' out of range: must be an integer >= 1"),
])
def test_range_errors_state_the_allowed_range(tmp_path, capsys, argv, toml, needle):
    extra = []
    if toml:
        (tmp_path / "c.toml").write_text(toml)
        extra = ["--config", str(tmp_path / "c.toml")]
    assert main(["run", *argv, *extra, "--archive", str(tmp_path / "a.db")]) == 2
    assert needle in _one_line(capsys)


@pytest.mark.real_data
@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_fit_head_seconds_must_be_finite_and_positive(value, capsys):
    assert main(["fit", "linear", "--head-seconds", value]) == 2
    assert "--head-seconds" in _one_line(capsys)


def test_the_executor_checks_the_cap_again_before_any_process_exists():
    """A config that skipped validation (a library caller) still cannot fork 4096."""
    from evolve.config.schema import Config
    from evolve.errors import ConfigError
    from evolve.search.execution.executors import make_executor

    cfg = Config()
    cfg.run.workers = 4096  # not validated
    with pytest.raises(ConfigError, match=r"run.workers' out of range"):
        make_executor(None, cfg)  # type: ignore[arg-type]


@pytest.mark.real_data
def test_baselines_count_the_runs_they_have(data_path, tmp_path, capsys):
    """On a data directory of two runs the summary says "of 2" (it said "of 12" always),
    and ``--only roofline`` does not announce fitting the linear baseline."""
    import shutil

    root = tmp_path / "data"
    for sub in ("models", "hardware"):
        shutil.copytree(data_path / sub, root / sub)
    for name in ("20260217-155451-llama-2-7b-tp1-codegen",
                 "20260217-170634-llama-2-7b-tp1-reasoning"):
        shutil.copytree(data_path / "experiments" / name, root / "experiments" / name)
    assert main(["baselines", "--data", str(root), "--only", "roofline"]) == 0
    out = capsys.readouterr()
    assert "== roofline: 0 of 1 non-reasoning runs within 10% mean E2E" in out.out, out.out
    assert "fitting the linear" not in out.err


@pytest.mark.real_data
@pytest.mark.parametrize("make, needle", [
    ("text", "not an evolve archive (not SQLite"),
    ("other-schema", "not an evolve archive (no schema_version table)"),
    ("directory", "a directory, not an archive file"),
    ("no-parent", "does not exist"),
])
def test_study_refuses_an_archive_that_is_not_one_before_any_seed(tmp_path, capsys, make,
                                                                   needle):
    """Every seed's `evolve run` failed on it in turn, in its log, and the study exited 1."""
    path = {"text": tmp_path / "a.txt", "other-schema": tmp_path / "o.db",
            "directory": tmp_path, "no-parent": tmp_path / "gone" / "a.db"}[make]
    if make == "text":
        path.write_text("hello\n")
    elif make == "other-schema":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE foo (x)")
        con.commit()
        con.close()
    out = tmp_path / "study"
    assert main(["study", "--seeds", "1", "2", "--generations", "0", "--archive", str(path),
                 "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert needle in line and str(path) in line, line
    assert not list(out.glob("seed-*"))


@pytest.mark.real_data
@pytest.mark.parametrize("text", ["{cut short", "[]", '{"settings": null}'])
def test_study_names_a_damaged_seed_result(tmp_path, capsys, text):
    """A seed-S.json cut short (a full disk, a kill mid-write) was an internal error."""
    out = tmp_path / "study"
    out.mkdir()
    (out / "seed-1.json").write_text(text)
    assert main(["study", "--seeds", "1", "--generations", "0", "--out", str(out)]) == 2
    assert f"{out / 'seed-1.json'}: not the result of seed 1" in _one_line(capsys)


@pytest.mark.real_data
def test_export_trace_of_a_blank_experiment(tmp_path, capsys):
    """A blank name is in every name: it was called ambiguous."""
    assert main(["export-trace", " ", "--out", str(tmp_path / "t")]) == 2
    assert "EXPERIMENT: blank; name an experiment" in _one_line(capsys)


@pytest.mark.slow
@pytest.mark.real_data
def test_calibrate_refuses_a_program_without_a_finite_step_time(data_path, tmp_path, capsys):
    """It wrote its constants, NaN predictions and the export command, exit 0."""
    path = tmp_path / "p.py"
    path.write_text(NAN_STEP)
    out = tmp_path / "out"
    assert main(["calibrate", str(path), "--model-config",
                 str(data_path / "models" / "Llama-2-7b-hf"), "--max-evals", "20",
                 "--out", str(out)]) == 2
    assert f"{path}: no constants in its bounds price Llama-2-7b-hf's batches (match loss " \
        "to layered inf" in _one_line(capsys)
    assert not list(out.iterdir())


@pytest.mark.real_data
def test_baselines_say_when_the_linear_one_is_not_fitted(data_path, tmp_path, capsys):
    """A model without a train run kept the linear baseline's initial constants silently."""
    root = tmp_path / "data"
    name = "20260217-170634-llama-2-7b-tp1-reasoning"  # the test split
    (root / "experiments").mkdir(parents=True)
    for sub in ("models", "hardware", f"experiments/{name}"):
        (root / sub).symlink_to((data_path / sub).resolve())
    assert main(["baselines", "--data", str(root), "--only", "linear"]) == 0
    assert ("note: no train run of llama-2-7b: the linear baseline keeps its initial "
            "constants there") in capsys.readouterr().err
