"""Reading a measured run's JSON files field by field, each failure naming file and field.

Why a module of its own: the bundled per-request files (``requests.json`` +
``ground_truth.json``) are read by two callers, the scenario loader and ``evolve ingest``
of a bundled-format directory, and both must reject the same malformed rows with the
same message. One reader keeps them from drifting apart.

Every reader of a user's JSON or YAML file goes through :func:`_read_json` or
:func:`read_yaml`, which turn what the parsers raise beyond their own errors into the
same one-line :class:`DataError` naming the file and the field: a number of more than
4,300 digits (Python's int-string limit, a ``ValueError``), nesting deeper than the
interpreter's recursion limit (``RecursionError``), an invalid date in YAML
(``created_at: 2026-02-30``), an overflow.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_DEEP = 64  # opening brackets in a row that mark where a too-deep nesting starts
_KEY = r"[\"']?([^\s\"':{}\[\],]+)[\"']?\s*:\s*"  # a key and its colon, JSON or YAML


class DataError(ValueError):
    """A data file is missing or malformed; the message names the file and the field."""


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return json.loads(text)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:  # a directory where the file should be, no permission
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    except (ValueError, RecursionError, OverflowError) as exc:  # past the parser's limits
        raise DataError(f"{path}: {limit_problem(exc, text)}") from None


def limit_problem(exc: BaseException, text: str) -> str:
    """What a JSON or YAML text holds that Python cannot read (``exc``: its ValueError,
    RecursionError or OverflowError), naming the field where the text shows it."""
    if isinstance(exc, RecursionError):
        m = re.search(_KEY + r"(?:[\[{]\s*){" + str(_DEEP) + "}", text)
        where = f"field '{m.group(1)}': " if m else ""
        return (f"{where}nested too deeply (more than about {sys.getrecursionlimit()} "
                "levels)")
    limit = sys.get_int_max_str_digits() or 4300
    m = re.search(_KEY + r"[-+]?[0-9]{" + str(limit + 1) + "}", text)
    if m or "digits" in str(exc):
        where = f"field '{m.group(1)}': " if m else ""
        return f"{where}a number of more than {limit} digits (not a measured value)"
    return f"unreadable value ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"


def _line_field(text: str, line: int | None) -> str:
    """The key on line ``line`` (0-based) of a YAML text, or ''."""
    if line is None:
        return ""
    lines = text.splitlines()
    m = re.match(r"\s*(?:-\s+)?[\"']?([^\"':#{}\[\],]+?)[\"']?\s*:(?:\s|$)",
                 lines[line] if 0 <= line < len(lines) else "")
    return m.group(1).strip() if m else ""


@functools.cache
def yaml_loader(strict: bool = False) -> type:
    """PyYAML's safe loader, whose constructors' ``ValueError``/``OverflowError`` (an
    invalid date such as 2026-02-30, an integer past Python's digit limit) become YAML
    errors at the value's line; with ``strict``, a key given twice is refused (BLIS's
    yaml.v3 does; PyYAML keeps the last), checked with a set (a list made a 1.6 MB header
    of 100,000 keys take 491 s)."""
    import yaml
    from yaml.constructor import ConstructorError

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses 5x faster

    class Loader(base):
        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, OverflowError) as exc:
                value = str(getattr(node, "value", ""))[:40]
                why = (f"a number of more than {sys.get_int_max_str_digits()} digits"
                       if "digits" in str(exc) else f"invalid value {value!r} ({exc})")
                raise ConstructorError(None, None, why, node.start_mark) from None

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            if strict and isinstance(node, yaml.MappingNode):
                self.flatten_mapping(node)  # merge keys (<<) first, as SafeLoader does
                seen: set[Any] = set()
                for key_node, _value in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        twice = key in seen
                        seen.add(key)
                    except TypeError:  # unhashable: the parent's to refuse, by name
                        continue
                    if twice:
                        raise ConstructorError(None, None, f"key {key!r} given twice",
                                               key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def read_yaml(path: Path, *, strict: bool = False, max_bytes: int | None = None,
              what: str = "file") -> Any:
    """A YAML (or JSON) file as Python values, or a one-line :class:`DataError` naming the
    file, the line and the field; ``max_bytes`` refuses a larger file before parsing it."""
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read(-1 if max_bytes is None else max_bytes + 1)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:  # a directory where the file should be, no permission
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise DataError(f"{path}: larger than {max_bytes:,} bytes; a {what} is at most that")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: cannot read (not UTF-8 text: byte {exc.start})") from None
    try:
        return yaml.load(text, Loader=yaml_loader(strict))  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        field = _line_field(text, line)
        where = (f", field '{field}'" if field else "") + (
            f" (line {line + 1})" if line is not None else "")
        why = getattr(exc, "problem", None)
        raise DataError(f"{path}: not valid YAML{where}" + (f": {why}" if why else "")) from None
    except (RecursionError, ValueError, OverflowError) as exc:
        raise DataError(f"{path}: {limit_problem(exc, text)}") from None


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
