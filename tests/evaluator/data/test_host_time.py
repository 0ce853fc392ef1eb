"""evaluator.data.host_time: the sampled schedule calls' median host time per run, and a
one-line error naming the file, line and field for a file that cannot give it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.data.host_time import SAMPLED_STEPS, sampled_host_us, sampled_steps
from evaluator.data.run_files import DataError

HEAD = "experiment_id,model,workload,step.id,step.duration_us,predicted_us,model_type\n"


def _write(root: Path, text: str) -> Path:
    path = root / SAMPLED_STEPS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_median_of_each_runs_sampled_steps(tmp_path):
    _write(tmp_path, HEAD + "a,m,w,1,100,0,x\na,m,w,2,300,0,x\na,m,w,3,9000,0,x\n"
                            "b,m,w,1,40,0,x\n")
    assert sampled_host_us(tmp_path) == {"a": 300.0, "b": 40.0}


@pytest.mark.parametrize(("text", "message"), [
    ("experiment_id,step.id\na,1\n", "no column 'step.duration_us'"),
    (HEAD + "a,m,w,1,fast,0,x\n", "line 2: step.duration_us must be a finite number"),
    (HEAD + "a,m,w,1,100,0,x\na,m,w,2,-5,0,x\n", "line 3: step.duration_us must be"),
    (HEAD + "a,m,w,1,inf,0,x\n", "line 2: step.duration_us must be a finite number"),
])
def test_a_bad_file_names_file_line_and_field(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(DataError, match=message) as err:
        sampled_host_us(tmp_path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_a_missing_file_says_what_needs_it(tmp_path):
    with pytest.raises(DataError, match=r"file not found .*--host-floor measured"):
        sampled_host_us(tmp_path)


def test_the_sampled_steps_file_is_read_sorted_per_run(tmp_path):
    _write(tmp_path, "experiment_id,model,workload,step.id,step.duration_us,predicted_us,"
                     "model_type\n"
                     "run-a,m,w,30,300,1,x\nrun-a,m,w,10,100,1,x\nrun-b,m,w,7,70,1,x\n")
    steps = sampled_steps(tmp_path)
    ids, host = steps["run-a"]
    assert list(ids) == [10, 30] and list(host) == [100.0, 300.0]
    assert list(steps["run-b"][0]) == [7]
