"""evolve.workflows.ingest: a TraceV2 pair is found from either file, and a source that is
not one is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.errors import UserError
from evolve.workflows.ingest import IngestOptions, ingest, trace_paths


def test_trace_paths_find_the_other_file_beside_the_one_named():
    assert trace_paths("t/run.yaml", None) == (Path("t/run.yaml"), Path("t/run.csv"))
    assert trace_paths("t/run.csv", None) == (Path("t/run.yaml"), Path("t/run.csv"))
    assert trace_paths("t/run.yaml", "d/x.csv") == (Path("t/run.yaml"), Path("d/x.csv"))


@pytest.mark.parametrize("source, extra, needle", [
    ("missing.yaml", {}, "--model: required for a TraceV2 source"),
    ("missing.txt", {}, "no such file or directory"),
    ("notes.txt", {}, "not a TraceV2 .yaml/.csv nor an inference-perf directory"),
    (".", {"trace_data": "x.csv"}, "apply to TraceV2 sources"),
])
def test_a_source_that_is_not_one_writes_nothing(tmp_path, source, extra, needle):
    (tmp_path / "notes.txt").write_text("hello\n")
    out = tmp_path / "new" / "data"
    opts = IngestOptions(str(tmp_path / source), str(out), "H100", **extra)
    with pytest.raises(UserError, match=needle):
        ingest(opts)
    assert not (tmp_path / "new").exists()
