"""BLIS TraceV2, both ways: the YAML header + per-request CSV that ``blis observe`` records.

Why a module of its own: a trace is the hand-off between a user's measured run and evolve
(``evolve ingest``) and between evolve and ``blis replay`` (``evolve export-trace``). Both
directions must agree with BLIS's own reader (``sim/workload/tracev2.go`` at the commit
pinned in ``docs/blis.md``) column for column, or a trace we write would be misread by
BLIS, and one BLIS writes misread here. So this module mirrors that reader: the 27 required
columns in BLIS's order (BLIS parses by position), the optional ``vllm_priority`` (after
``slo_class``) and ``slo_target_us`` (after ``deadline_us``), trailing ``x_request_id``,
``adapter`` and ``think_time_us``; the header read strictly (an unknown key is an error, as
BLIS's ``KnownFields(true)``); and BLIS's per-field rules (non-negative counts,
``reason_ratio`` in [0, 1], a deadline not before its arrival). It adds the checks a
measured run needs: no negative time, chunk times in order, no request finishing before
it was sent, unique request ids. Any violation is a ``DataError`` of one line naming the
file, the row and the field.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.run_files import DataError, read_yaml  # not scenarios: no numba to read a file

REQUIRED = (
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
    "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
    "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio",
    "model", "deadline_us", "server_input_tokens",
    "arrival_time_us", "send_time_us", "first_chunk_time_us", "last_chunk_time_us",
    "num_chunks", "status", "error_message", "finish_reason",
)
TRAILING = ("x_request_id", "adapter", "think_time_us")
# Integer columns and whether BLIS (or a measured run) forbids negative values.
INT_COLUMNS = {
    "request_id": False, "round_index": False, "vllm_priority": True, "prefix_length": True,
    "input_tokens": True, "output_tokens": True, "text_tokens": True, "image_tokens": True,
    "audio_tokens": True, "video_tokens": True, "deadline_us": True, "slo_target_us": True,
    "server_input_tokens": True, "arrival_time_us": True, "send_time_us": True,
    "first_chunk_time_us": True, "last_chunk_time_us": True, "num_chunks": True,
    "think_time_us": True,
}
HEADER_KEYS = {
    "trace_version": int, "time_unit": str, "created_at": str, "mode": str,
    "warm_up_requests": int, "workload_seed": int, "workload_spec": str,
    "session_context_growth": str, "server": dict, "network": dict,
    "goodput_slo_targets": dict, "kv_offload": dict, "observed_kv_metrics": dict,
}
SERVER_KEYS = {"type": str, "model": str, "tensor_parallel": int, "max_num_seqs": int,
               "block_size": int, "gpu_memory_utilization": float, "max_model_len": int}
TIME_UNITS = ("us", "microseconds", "µs")
MAX_HEADER_BYTES = 256 << 10  # a header BLIS writes is under 1 KB; this much parses in < 1 s
MAX_LINE_BYTES = 1 << 20  # a CSV line (characters); a request row is a few hundred
# ASCII digits, as Go's strconv (\d takes any script's)
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
         "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


@dataclass
class TraceV2:
    """A loaded trace: the header as a dict and one numpy array per CSV column."""

    header: dict[str, Any]
    columns: dict[str, np.ndarray]  # int64 / float64 / bool, or object (text)
    header_path: Path
    data_path: Path

    @property
    def n(self) -> int:
        return int(self.columns["request_id"].shape[0])

    def where(self, row: int) -> str:
        """``file: row N (line L)`` for row index ``row`` (0-based), for error messages."""
        return f"{self.data_path}: row {row + 1} (line {row + 2})"


def expected_columns(present: set[str]) -> list[str]:
    """BLIS's positional column order given which optional columns a file has."""
    cols: list[str] = []
    for col in REQUIRED:
        cols.append(col)
        if col == "slo_class" and "vllm_priority" in present:
            cols.append("vllm_priority")
        if col == "deadline_us" and "slo_target_us" in present:
            cols.append("slo_target_us")
    return cols + [c for c in TRAILING if c in present]


def _check_header(doc: Any, path: Path) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise DataError(f"{path}: not a TraceV2 header (expected a YAML mapping)")
    for key, val in doc.items():
        kind = HEADER_KEYS.get(str(key))
        if kind is None:
            raise DataError(f"{path}: field '{key}' is not a TraceV2 header field "
                            "(BLIS reads headers strictly)")
        if val is None:
            continue
        if kind is str and not isinstance(val, (dict, list)):
            doc[key] = val = str(val)  # YAML may read created_at as a timestamp
        if isinstance(val, bool) or not isinstance(val, kind):
            raise DataError(f"{path}: field '{key}' has wrong type {type(val).__name__}")
    for key, val in (doc.get("network") or {}).items():  # BLIS: measured_rtt_ms float64
        if key != "measured_rtt_ms":
            raise DataError(f"{path}: field 'network.{key}' is not a TraceV2 network field")
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise DataError(f"{path}: field 'network.{key}' has invalid value {val!r}")
    for key, val in (doc.get("server") or {}).items():
        kind = SERVER_KEYS.get(str(key))
        if kind is None:
            raise DataError(f"{path}: field 'server.{key}' is not a TraceV2 server field")
        ok = isinstance(val, (int, float)) if kind is float else isinstance(val, kind)
        if not ok or isinstance(val, bool) or (kind is int and val < 0):
            raise DataError(f"{path}: field 'server.{key}' has invalid value {val!r}")
    if doc.get("time_unit") not in (None, *TIME_UNITS):
        raise DataError(f"{path}: field 'time_unit' is {doc['time_unit']!r}; TraceV2 times are "
                        "microseconds ('us' or 'microseconds')")
    if doc.get("warm_up_requests") is not None and doc["warm_up_requests"] < 0:
        raise DataError(f"{path}: field 'warm_up_requests' is negative")
    if doc.get("trace_version") is not None and doc["trace_version"] < 1:
        raise DataError(f"{path}: field 'trace_version' is {doc['trace_version']}; BLIS "
                        "writes 2")
    share = (doc.get("server") or {}).get("gpu_memory_utilization")
    if share is not None and not 0.0 < share <= 1.0:  # NaN fails too; BLIS's flag range
        raise DataError(f"{path}: field 'server.gpu_memory_utilization' is {share!r}; a "
                        "share of GPU memory in (0, 1]")
    return doc


def read_header(path: Path) -> dict[str, Any]:
    """The header, read strictly (a key given twice is refused, as BLIS does) and bounded
    (:data:`MAX_HEADER_BYTES`; linear in its size): ``evaluator.data.run_files.read_yaml``."""
    doc = read_yaml(Path(path), strict=True, max_bytes=MAX_HEADER_BYTES,
                    what="TraceV2 header")
    return _check_header({} if doc is None else doc, Path(path))


def _lines(fh: Any, path: Path) -> Iterator[str]:
    """The CSV's lines, each read with a bound (:data:`MAX_LINE_BYTES`): a longer line is
    refused before it is held or split (one 200 MB row once took 2 GB to refuse)."""
    for number in itertools.count(1):
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            raise DataError(f"{path}: line {number} is longer than {MAX_LINE_BYTES:,} "
                            "characters (a request row is a few hundred)")
        yield line


def _parse_rows(reader, path: Path, cols: list[str], n_head: int) -> dict[str, list]:
    data: dict[str, list] = {c: [] for c in cols}
    for i, row in enumerate(reader):
        where = f"{path}: row {i + 1} (line {reader.line_num})"
        if len(row) < len(cols):
            missing = cols[len(row)]
            raise DataError(f"{where}, field '{missing}': missing ({len(row)} columns, "
                            f"expected {len(cols)})")
        if len(row) != n_head:  # Go's CSV reader wants every row as long as the header
            raise DataError(f"{where}: {len(row)} columns, the header has {n_head}")
        for j, col in enumerate(cols):
            raw = row[j]
            if col in INT_COLUMNS:
                if col == "think_time_us" and raw.strip() == "":
                    raw = "0"
                if not _INT.fullmatch(raw):
                    raise DataError(f"{where}, field '{col}': not an integer: {raw[:40]!r}")
                if len(raw) > 20:  # past int64 (and int()'s 4,300-digit limit: ValueError)
                    raise DataError(f"{where}, field '{col}': out of range: {len(raw)} digits")
                val: Any = int(raw)
                if not -(2**62) <= val <= 2**62:  # an int64 column, with room for sums
                    raise DataError(f"{where}, field '{col}': out of range: {raw}")
                if val < 0 and INT_COLUMNS[col]:
                    raise DataError(f"{where}, field '{col}': negative value {val}")
            elif col == "streaming":
                if raw not in _BOOL:
                    raise DataError(f"{where}, field 'streaming': not a boolean: {raw!r}")
                val = _BOOL[raw]
            elif col == "reason_ratio":
                if not _FLOAT.fullmatch(raw):  # Go's ParseFloat: no spaces, _ or other digits
                    raise DataError(f"{where}, field 'reason_ratio': not a number: {raw!r}")
                val = float(raw)
                if not 0.0 <= val <= 1.0:
                    raise DataError(f"{where}, field 'reason_ratio': {raw} not in [0, 1]")
            else:
                val = raw.strip() if col in ("error_message", "finish_reason") else raw
            data[col].append(val)
    return data


def read_tracev2(header_path: str | Path, data_path: str | Path) -> TraceV2:
    """Load and validate a TraceV2 pair; ``DataError`` (file, row, field) on anything wrong."""
    header_path, data_path = Path(header_path), Path(data_path)
    header = read_header(header_path)
    try:
        with open(data_path, encoding="utf-8", newline="") as fh:
            reader = csv.reader(_lines(fh, data_path))
            head = next(reader, None)
            if head is None:
                raise DataError(f"{data_path}: empty file (no CSV header row)")
            if head and head[0].startswith("\ufeff"):
                raise DataError(f"{data_path}: line 1 starts with a UTF-8 byte-order mark "
                                "(BLIS would read it into the first column's name); save "
                                "the file without one")
            cols = expected_columns(set(head))
            for j, col in enumerate(cols):
                if col not in head:
                    raise DataError(f"{data_path}: line 1, field '{col}': missing column")
                if j >= len(head) or head[j] != col:
                    raise DataError(f"{data_path}: line 1, field '{col}': expected as column "
                                    f"{j + 1} (BLIS reads columns by position), found "
                                    f"{head[j] if j < len(head) else 'nothing'!r}")
            data = _parse_rows(reader, data_path, cols, len(head))
    except FileNotFoundError:
        raise DataError(f"{data_path}: file not found") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise DataError(f"{data_path}: not a readable CSV ({exc})") from None
    except OSError as exc:  # a directory, a symlink loop, no permission
        raise DataError(f"{data_path}: cannot read ({exc.strerror})") from None
    if not data["request_id"]:
        raise DataError(f"{data_path}: no request rows")
    columns: dict[str, np.ndarray] = {}
    for col, vals in data.items():
        if col in INT_COLUMNS:
            columns[col] = np.asarray(vals, dtype=np.int64)
        elif col == "streaming":
            columns[col] = np.asarray(vals, dtype=bool)
        elif col == "reason_ratio":
            columns[col] = np.asarray(vals, dtype=np.float64)
        else:
            columns[col] = np.asarray(vals, dtype=object)
    trace = TraceV2(header, columns, header_path, data_path)
    _check_rows(trace)
    return trace


def _check_rows(t: TraceV2) -> None:
    """Cross-field rules: BLIS's deadline rule, unique ids, chunk times in order."""
    c = t.columns
    ids = c["request_id"]
    first_seen: dict[int, int] = {}
    for i, rid in enumerate(ids.tolist()):
        if rid in first_seen:
            raise DataError(f"{t.where(i)}, field 'request_id': duplicate id {rid} "
                            f"(also row {first_seen[rid] + 1})")
        first_seen[rid] = i
    arr, dl = c["arrival_time_us"], c["deadline_us"]
    bad = np.flatnonzero((dl > 0) & (arr > 0) & (dl < arr))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{t.where(i)}, field 'deadline_us': {dl[i]} precedes arrival_time_us "
                        f"{arr[i]}")
    send, first, last = c["send_time_us"], c["first_chunk_time_us"], c["last_chunk_time_us"]
    base = np.where(send > 0, send, arr)
    checks = (
        ((first > 0) & (first < base), "first_chunk_time_us",
         "first chunk before the request was sent"),
        ((last > 0) & (first > 0) & (last < first), "last_chunk_time_us",
         "last chunk before the first chunk (timestamps not monotonic)"),
        ((last > 0) & (last < base), "last_chunk_time_us",
         "request finished before it arrived"),
        ((c["status"] == "ok") & (last <= 0), "last_chunk_time_us",
         "status ok but no completion time"),
        (c["status"] == "", "status", "empty (expected ok, error, timeout, ...)"),
    )
    for mask, col, msg in checks:
        bad = np.flatnonzero(mask)
        if bad.size:
            raise DataError(f"{t.where(int(bad[0]))}, field '{col}': {msg}")


def _fmt(col: str, val: Any) -> str:
    if col == "streaming":
        return "true" if val else "false"
    if col == "reason_ratio":
        f = float(val)
        return str(int(f)) if f.is_integer() else repr(f)
    if col in INT_COLUMNS:
        return str(int(val))
    return "" if val is None else str(val)


def write_tracev2(header: dict[str, Any], columns: dict[str, Any], prefix: str | Path
                  ) -> tuple[Path, Path]:
    """Write ``<prefix>.yaml`` and ``<prefix>.csv`` as BLIS's ``ExportTraceV2`` lays them out.

    ``columns`` must hold every required column (numbers or strings, one value per
    request); optional columns are written when present. Returns (header, data) paths.
    """
    import yaml

    _check_header(dict(header), Path(f"{prefix}.yaml"))
    n = len(columns["request_id"])
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise ValueError(f"write_tracev2: missing columns {missing}")
    cols = expected_columns(set(columns))
    hpath, dpath = Path(f"{prefix}.yaml"), Path(f"{prefix}.csv")
    hpath.parent.mkdir(parents=True, exist_ok=True)
    hpath.write_text(yaml.safe_dump(header, sort_keys=False, allow_unicode=True),
                     encoding="utf-8")
    values = {c: list(np.asarray(columns[c]).tolist()) for c in cols}
    with open(dpath, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for i in range(n):
            w.writerow([_fmt(c, values[c][i]) for c in cols])
    return hpath, dpath
