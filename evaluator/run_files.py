"""Reading a measured run's JSON files field by field, each failure naming file and field.

Why a module of its own: the bundled per-request files (``requests.json`` +
``ground_truth.json``) are read by two callers, the scenario loader and ``evolve ingest``
of a bundled-format directory, and both must reject the same malformed rows with the
same message. One reader keeps them from drifting apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class DataError(ValueError):
    """A data file is missing or malformed; the message names the file and the field."""


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:  # a directory where the file should be, no permission
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def _get(obj: Any, path: Path, dotted: str, kind: type | tuple[type, ...] = (int, float),
         positive: bool = False, *, at: str = "") -> Any:
    """``obj[a][b]`` for ``dotted`` = "a.b", of type ``kind`` and finite (``positive``: and
    above zero, for sizes and rates that divide); else a DataError naming file and field.
    ``at``: where ``obj`` sits in the file (e.g. ``load.stages[0].``), for the message."""
    field = at + dotted
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise DataError(f"{path}: missing field '{field}'")
        cur = cur[part]
    if not isinstance(cur, kind) or (isinstance(cur, bool) and kind is not bool):
        raise DataError(f"{path}: field '{field}' has wrong type {type(cur).__name__}")
    if isinstance(cur, int) and not isinstance(cur, bool) and abs(cur) > 2**62:
        raise DataError(f"{path}: field '{field}' is out of range ({cur})")
    if isinstance(cur, float) and not np.isfinite(cur):
        raise DataError(f"{path}: field '{field}' is not finite")
    if positive and not (isinstance(cur, int | float) and cur > 0):
        raise DataError(f"{path}: field '{field}' must be positive (got {cur})")
    return cur


def _column(rows: list[Any], path: Path, where: str, key: str, kind: type = float,
            optional: bool = False) -> list[Any]:
    """``row[key]`` of every row as ``kind`` (None where ``optional`` and absent); a bad row
    raises naming its index and field (``requests[17].input_tokens``). Numbers must be
    finite and non-negative: every per-request field of these files is a time or a count."""
    out: list[Any] = []
    for i, row in enumerate(rows):
        val = row.get(key) if isinstance(row, dict) else None
        try:
            if val is None and optional and isinstance(row, dict):
                out.append(None)
                continue
            if isinstance(val, (str, type(None))) or (isinstance(val, bool) and kind is not bool):
                raise ValueError
            if kind is int and isinstance(val, float) and not val.is_integer():
                raise ValueError  # 12.5 tokens: int() would truncate it silently
            got = kind(val)
            if kind is not bool and not (np.isfinite(got) and got >= 0):
                raise ValueError
            out.append(got)
        except (TypeError, ValueError, OverflowError):
            raise DataError(f"{path}: field '{where}[{i}].{key}' missing or invalid "
                            f"({val!r})") from None
    return out


@dataclass(frozen=True)
class RequestRows:
    """One run's per-request columns, in ``requests.json`` order, as the files state them.

    ``e2e_s``/``ttft_s`` are NaN for failed requests (and ``ttft_s`` where a completed
    request has none); ``output_tokens`` are the client-side counts (data README trap 4:
    often wrong; 0 where absent). ``doc`` is the whole ``requests.json`` for its
    run-level fields (``config``, ``split``, ``profile``...), which each caller checks.
    """

    doc: dict[str, Any]
    arrival_us: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    failed: np.ndarray
    e2e_s: np.ndarray
    ttft_s: np.ndarray


def read_request_rows(exp_dir: Path) -> RequestRows:
    """``requests.json`` + ``ground_truth.json`` of one run, every row checked."""
    req_path, gt_path = exp_dir / "requests.json", exp_dir / "ground_truth.json"
    doc = _read_json(req_path)
    if not isinstance(doc, dict):
        raise DataError(f"{req_path}: expected a JSON object")
    reqs = _get(doc, req_path, "requests", list)
    if not reqs:
        raise DataError(f"{req_path}: field 'requests' is empty")
    col = lambda key, kind=float, optional=False: _column(  # noqa: E731
        reqs, req_path, "requests", key, kind, optional)
    arrival = np.array(col("arrival_time_us"), np.float64)
    inp = np.array(col("input_tokens", int), np.int64)
    err = np.array(col("has_error", bool))
    idx = col("index", int)
    out = np.array([c or 0 for c in col("output_tokens", int, True)], np.int64)

    gt = _get({"gt": _read_json(gt_path)}, gt_path, "gt", list)
    if len(gt) != len(reqs):
        raise DataError(f"{gt_path}: field 'length' {len(gt)} != {len(reqs)} requests")
    pos = {i: j for j, i in enumerate(idx)}
    gt_failed = _column(gt, gt_path, "", "has_error", bool)
    rows = [pos.get(i, -1) for i in _column(gt, gt_path, "", "index", int)]
    if -1 in rows:
        raise DataError(f"{gt_path}: field '[{rows.index(-1)}].index' names no request of "
                        f"{req_path.name}")
    e2e_col = _column(gt, gt_path, "", "e2e_s", optional=True)
    ttft_col = _column(gt, gt_path, "", "ttft_s", optional=True)
    e2e, ttft = np.full(len(gt), np.nan), np.full(len(gt), np.nan)
    for i, j in enumerate(rows):
        if gt_failed[i]:
            continue
        if e2e_col[i] is None:
            raise DataError(f"{gt_path}: field '[{i}].e2e_s' missing on a completed request")
        e2e[j] = e2e_col[i]
        ttft[j] = np.nan if ttft_col[i] is None else ttft_col[i]
        if ttft[j] > e2e[j] * (1.0 + 1e-9) + 1e-6:  # the first token after the last one
            raise DataError(f"{gt_path}: field '[{i}].ttft_s' {ttft[j]:g} exceeds its e2e_s "
                            f"{e2e[j]:g}")
    return RequestRows(doc=doc, arrival_us=arrival, input_tokens=inp, output_tokens=out,
                       failed=err, e2e_s=e2e, ttft_s=ttft)
