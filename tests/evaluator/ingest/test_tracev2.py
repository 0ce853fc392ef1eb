"""The TraceV2 reader and writer agree with BLIS's format and refuse bad input in one line."""

from __future__ import annotations

import re

import numpy as np
import pytest
from needs import build_blis, require_blis
from trace_helpers import columns, edit_csv, write

from evaluator.data.scenarios import DataError
from evaluator.ingest.tracev2 import REQUIRED, expected_columns, read_tracev2, write_tracev2


def test_write_then_read_keeps_every_column(tmp_path):
    header, cols = columns()
    cols["vllm_priority"] = np.arange(12) % 3
    cols["slo_target_us"] = np.full(12, 5000)
    h, d = write_tracev2(header, cols, tmp_path / "t")
    head = d.read_text().splitlines()[0].split(",")
    assert head[3:5] == ["slo_class", "vllm_priority"]  # BLIS's positional layout
    assert head[head.index("deadline_us") + 1] == "slo_target_us"
    assert head[-1] == "x_request_id"
    t = read_tracev2(h, d)
    assert t.n == 12 and t.header["server"]["model"] == "synthetic/tiny-llama-1b"
    for name, val in cols.items():
        got = t.columns[name]
        want = np.asarray(val)
        assert got.tolist() == want.tolist(), name


def test_required_columns_are_blis_columns(tmp_path):
    """The column list mirrors ``traceV2Columns`` in BLIS's tracev2.go."""
    from evolve.export.go.writer import BLIS_COMMIT

    rel = "sim/workload/tracev2.go"
    build_blis.extract(require_blis(BLIS_COMMIT), tmp_path, BLIS_COMMIT, [rel])
    src = (tmp_path / rel).read_text()
    block = re.search(r"var traceV2Columns = \[\]string\{(.*?)\n\}", src, re.S).group(1)
    assert tuple(re.findall(r'"([a-z_0-9]+)"', block)) == REQUIRED
    assert expected_columns(set()) == list(REQUIRED)


BAD_CELLS = [
    (2, "input_tokens", "-5", "negative value -5"),
    (4, "output_tokens", "abc", "not an integer"),
    (1, "reason_ratio", "1.5", "not in [0, 1]"),
    (0, "streaming", "yes", "not a boolean"),
    (5, "last_chunk_time_us", "1771340000100000", "not monotonic"),
    (6, "first_chunk_time_us", "1771340000000001", "before the request was sent"),
    (8, "deadline_us", "1", "precedes arrival_time_us"),
    (2, "request_id", "100", "duplicate id 100"),
    (1, "status", "", "status"),
    (2, "input_tokens", "99999999999999999999999", "out of range"),  # once an OverflowError
]


@pytest.mark.parametrize(("row", "col", "value", "needle"), BAD_CELLS)
def test_bad_cell_names_file_row_and_field(tmp_path, row, col, value, needle):
    h, d = write(tmp_path / "t")
    edit_csv(d, row, col, value)
    with pytest.raises(DataError) as exc:
        read_tracev2(h, d)
    msg = str(exc.value)
    assert str(d) in msg and f"row {row + 1}" in msg and f"'{col}'" in msg and needle in msg
    assert "\n" not in msg


def test_a_row_longer_than_the_header_is_refused(tmp_path):
    """BLIS's CSV reader refuses it; so does ingest (it once took the row)."""
    h, d = write(tmp_path / "t")
    lines = d.read_text().splitlines()
    lines[3] += ",extra"
    d.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as exc:
        read_tracev2(h, d)
    assert f"{d}: row 3 (line 4): " in str(exc.value) and "the header has" in str(exc.value)


def test_finished_before_it_arrived(tmp_path):
    h, d = write(tmp_path / "t")
    edit_csv(d, 4, "first_chunk_time_us", "0")
    edit_csv(d, 4, "last_chunk_time_us", "5")
    with pytest.raises(DataError, match=r"row 5 .*'last_chunk_time_us': request finished "
                                        r"before it arrived"):
        read_tracev2(h, d)


def test_missing_and_misplaced_columns(tmp_path):
    h, d = write(tmp_path / "t")
    edit_csv(d, None, "video_tokens", None)
    with pytest.raises(DataError, match=r"line 1, field 'video_tokens': missing column"):
        read_tracev2(h, d)
    h, d = write(tmp_path / "u")
    text = d.read_text().replace("input_tokens,output_tokens", "output_tokens,input_tokens", 1)
    d.write_text(text)
    with pytest.raises(DataError, match=r"field 'input_tokens': expected as column 10"):
        read_tracev2(h, d)


@pytest.mark.parametrize(("text", "needle"), [
    ("trace_version: 2\nfoo: 1\n", "field 'foo' is not a TraceV2 header field"),
    ("time_unit: ms\n", "field 'time_unit'"),
    ("server:\n  tensor_parallel: two\n", "field 'server.tensor_parallel'"),
    ("server:\n  gpu: H100\n", "field 'server.gpu' is not a TraceV2 server field"),
    ("- a\n- b\n", "not a TraceV2 header"),
    ("key: [unclosed\n", "not valid YAML"),
])
def test_bad_header_is_one_line(tmp_path, text, needle):
    h, d = write(tmp_path / "t")
    h.write_text(text)
    with pytest.raises(DataError) as exc:
        read_tracev2(h, d)
    assert needle in str(exc.value) and str(h) in str(exc.value)


def test_missing_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_tracev2(tmp_path / "no.yaml", tmp_path / "no.csv")
    h, d = write(tmp_path / "t")
    d.write_text(",".join(REQUIRED) + "\n")
    with pytest.raises(DataError, match="no request rows"):
        read_tracev2(h, d)
