"""Translate an archived program into a drop-in BLIS ``LatencyModel`` (one Go file).

Why generate Go at all: a program found here is only useful if the simulator people run
(BLIS, github.com/inference-sim/inference-sim) can use it. The file is self-contained in
BLIS's ``package latency``: it computes the glossary features from ``[]*sim.Request``
exactly as ``evaluator/features/components.py`` does, evaluates the program with ``math`` only, and
looks up the fitted constants by the BLIS model name. It targets the BLIS commit in
:data:`BLIS_COMMIT` (the ``LatencyModel`` method set and config types read there); see
``docs/blis.md`` for registering it and for where BLIS's batches differ from ours.

Parity (``tests/evolve/export/test_go_parity.py``): on a golden corpus the Go step times equal
the numpy program's to 1e-9 relative.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluator.api import FEATURE_NAMES, FEATURES, REQUEST_FIELD_NAMES
from evolve.errors import ExportError
from evolve.export.go.body import field_names, function_body
from evolve.export.go.expr import NEG_ZERO, go_float
from evolve.export.go.kernels import KERNEL_FUNCS, kernels_lookup
from evolve.export.go.templates import (
    ARCH_GO,
    ASYNC_GO,
    FEATURE_GO,
    METHODS,
    MODEL_DECL,
    QUEUE_ASYNC,
    QUEUE_PLAIN,
    REQUEST_GO,
    STEP_ASYNC,
    STEP_PLAIN,
)

__all__ = ["BLIS_COMMIT", "BLIS_REPO", "ExportError", "GroupInfo", "export_go",
           "groups_from_scenarios", "kernels_from_scenarios", "type_prefix"]

BLIS_REPO = "github.com/inference-sim/inference-sim"
BLIS_COMMIT = "f90a1e3a6787da17c2cd463dab6fb2660b1b1760"  # 2026-08-22, read for this exporter
SCOPES = ("global", "per_model", "pooled", "per_scenario")
_SPECIAL = ("post_decode_us", "output_token_us")

assert tuple(n for n, _ in FEATURE_GO) == FEATURE_NAMES, "go_templates.FEATURE_GO is stale"
assert tuple(r[0] for r in REQUEST_GO) == REQUEST_FIELD_NAMES, "go_templates.REQUEST_GO is stale"


@dataclass(frozen=True)
class GroupInfo:
    """How BLIS names the model of one constant group, and what it was fitted on.

    ``aliases``: names matched (lower-cased) against BLIS's ``hw.Model`` or its part after
    the last ``/`` (e.g. ``llama-2-7b``, ``meta-llama/llama-2-7b-hf``). ``note``: free
    text for the comment above the constant set (e.g. the scenarios and TP).
    """

    aliases: tuple[str, ...]
    note: str = ""


def groups_from_scenarios(scenarios: Sequence[Any], scope: str) -> dict[str, GroupInfo]:
    """Group infos for ``scope`` from loaded ``Scenario`` objects (names, model ids, TP)."""
    acc: dict[str, tuple[set[str], list[str]]] = {}
    for sc in scenarios:
        key = {"global": "global", "per_model": sc.model, "pooled": sc.model,
               "per_scenario": sc.name}[scope]
        aliases, notes = acc.setdefault(key, (set(), []))
        mid = str(sc.meta.get("model_id", "")).lower()
        aliases.update(a for a in (sc.model.lower(), mid, mid.rsplit("/", 1)[-1]) if a)
        notes.append(f"{sc.name} (tp {sc.server.tp})")
    return {k: GroupInfo(tuple(sorted(a)), "fitted on " + ", ".join(n))
            for k, (a, n) in sorted(acc.items())}


def kernels_from_scenarios(scenarios: Sequence[Any]
                           ) -> dict[str, tuple[tuple[str, ...], list[float]]]:
    """Per model: (the names BLIS may use, its packed kernel curves), from ``Scenario``s
    that carry measured curves (``Scenario.kernels`` with flag 1)."""
    infos = groups_from_scenarios(scenarios, "per_model")
    out: dict[str, tuple[tuple[str, ...], list[float]]] = {}
    for sc in scenarios:
        block = [float(v) for v in sc.kernels]
        if block and block[0] > 0 and sc.model not in out:
            out[sc.model] = (infos[sc.model].aliases, block)
    return out


def type_prefix(program_id: str) -> str:
    """Go type prefix of a program: ``Evolved`` + the first 8 hex digits of its id."""
    return "Evolved" + re.sub(r"[^0-9a-fA-F]", "", program_id)[:8]


def _program(program: Any) -> Any:
    if isinstance(program, (str, bytes)):
        from evolve.program.language import parse_program

        return parse_program(program)
    return program


def _fmt_meta(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_fmt_meta(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_meta(v) for v in value)
    return " ".join(str(value).split())


def _one_line(text: str) -> str:
    """Text safe inside a ``//`` comment: whitespace (newlines included) collapsed."""
    return " ".join(str(text).split())


def _comment_block(lines: list[str]) -> list[str]:
    return [("// " + ln if ln.strip() else "//").rstrip() for ln in lines]


def _header(prog: Any, scope: str, groups: Sequence[str], meta: Mapping[str, Any],
            prefix: str, notes: Sequence[str] = ()) -> list[str]:
    info = [f"{prefix}Model: a step-time model for BLIS ({BLIS_REPO}) exported by"
            " evolve export-go.", "",
            f"Program: {prog.id}"]
    info += [_one_line(f"{k}: {_fmt_meta(v)}") for k, v in sorted(meta.items())]
    if notes:
        info += ["", *("".join(c if c.isprintable() else " " for c in n) for n in notes), ""]
    info += [_one_line(f"Constant scope: {scope} ({', '.join(groups)})"),
             f"Pinned BLIS commit: {BLIS_COMMIT}",
             "Install: copy into sim/latency/ and register the backend (evolve docs/blis.md).",
             "", "Program source:", ""]
    src = [("\t" + ln.replace("\t", "    ")) if ln.strip() else ""
           for ln in prog.source.rstrip("\n").splitlines()]
    return ["// Code generated by evolve export-go. DO NOT EDIT.", "",
            *_comment_block(info + src)]


def _struct(name: str, doc: str, fields: list[tuple[str, str]]) -> list[str]:
    out = [f"// {name} {doc}", f"type {name} struct {{"]
    for go, comment in fields:
        out += [f"\t// {go} is {comment}", f"\t{go} float64"]
    return [*out, "}"]


def _consts_literal(prefix: str, fields: dict[str, str], values: Mapping[str, float]) -> str:
    parts = [f"{go}: {_go_number(float(values[py]))}" for py, go in fields.items()]
    return f"{prefix}Consts{{{', '.join(parts)}}}"


def _go_number(v: float) -> str:
    if v == 0.0 and math.copysign(1.0, v) < 0:
        return NEG_ZERO
    return ("-" if v < 0 else "") + go_float(v)


def _lookup(prefix: str, low: str, scope: str, fields: dict[str, str],
            consts: Mapping[str, Mapping[str, float]],
            info: Mapping[str, GroupInfo]) -> tuple[list[str], bool]:
    """The ``$tConstsFor(model)`` function; returns (lines, uses the strings package)."""
    doc = f"// {low}ConstsFor returns the fitted constants for a BLIS model name (hw.Model)"
    head = f"func {low}ConstsFor(model string) ({prefix}Consts, error) {{"
    if scope == "global" or (len(consts) == 1 and scope == "per_scenario"):
        (group, values), = consts.items()
        note = _one_line(info[group].note) if group in info else ""
        lines = [doc + ".", f"// One constant set ({scope} scope) serves every model.",
                 *([f"// It was {note}."] if note else []), head,
                 f"\treturn {_consts_literal(prefix, fields, values)}, nil", "}"]
        return lines, False
    lines = [doc + ",", "// matched case-insensitively on the full name, then on the part"
             " after its last slash.", head,
             "\tname := strings.ToLower(model)",
             "\tfor _, key := range []string{name, name[strings.LastIndex(name, \"/\")+1:]} {",
             "\t\tswitch key {"]
    owner: dict[str, str] = {}
    fallback = consts.get("global") if scope == "pooled" else None
    for group, values in sorted(consts.items()):
        if fallback is not None and group == "global":
            continue
        gi = info.get(group, GroupInfo((group.lower(),)))
        names = {group.lower(), *(a.lower() for a in gi.aliases)}
        aliases = sorted(names | {a.rsplit("/", 1)[-1] for a in names})
        for a in aliases:
            if owner.setdefault(a, group) != group:
                raise ExportError(f"model name {a!r} belongs to groups {owner[a]!r} and "
                                  f"{group!r}; export one of them (--model)")
        lines.append("\t\tcase " + ", ".join(_go_string(a) for a in aliases) + ":")
        note = f", {_one_line(gi.note)}." if gi.note else "."
        lines.append(f"\t\t\t// Constant group {_one_line(group)}{note}")
        lines.append(f"\t\t\treturn {_consts_literal(prefix, fields, values)}, nil")
    if fallback is not None:  # pooled: a model nobody measured gets the shared set
        lines += ["\t\t}", "\t}", "\t// Any other model: the pooled scope's global set, what"
                  " the per-model sets were shrunk", "\t// towards (how a held-out model is"
                  " predicted in leave-one-model-out). A frontier pick is not",
                  "\t// chosen for transfer: for a model nobody measured, docs/selection.md"
                  " exports the layered rule.",
                  f"\treturn {_consts_literal(prefix, fields, fallback)}, nil", "}"]
        return lines, True
    known = ", ".join(sorted(consts)).replace("%", "%%")
    msg = _go_string(f"evolved model {prefix}: no fitted constants for model %q (known: {known})")
    lines += ["\t\t}", "\t}", f"\treturn {prefix}Consts{{}}, fmt.Errorf({msg}, model)", "}"]
    return lines, True


def _go_string(s: str) -> str:
    if not re.fullmatch(r"[\x20-\x7e]*", s):
        raise ExportError(f"model name {s!r} must be printable ASCII")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _special(name: str, fields: dict[str, str], low: str, what: str) -> tuple[str, str]:
    if name in fields:
        return f"{low}Ticks(m.consts.{fields[name]})", f"the constant {name}"
    return "0", f"0: the program has no {name} constant; {what}"


def export_go(program: Any, constants_by_group: Mapping[str, Mapping[str, float]],
              scope: str = "global", scenario_info: Mapping[str, GroupInfo] | None = None,
              meta: Mapping[str, Any] | None = None,
              kernels: Mapping[str, tuple[Sequence[str], Sequence[float]]] | None = None,
              notes: Sequence[str] = (), async_steps: bool = False) -> str:
    """Go source (gofmt-clean, ``package latency``) of ``program`` for BLIS.

    ``program``: an ``evolve.program.language.Program`` (or its source text).
    ``constants_by_group``:
    ``{group: {constant: value}}`` as fitted (``"global"`` for global scope, the model short
    name per model, the scenario name per scenario); every declared constant needs a value.
    ``scenario_info``: per group, the model names BLIS may use (:class:`GroupInfo`); a group
    without one answers to its own name. ``meta``: lines for the header (run id, scores);
    ``notes``: lines shown as they are below them (the accuracy table of ``export-go``).
    ``kernels``: per model, (BLIS names, packed measured kernel curves) to embed
    (:func:`kernels_from_scenarios`); a model without them gets the roofline fallback.
    ``async_steps``: the model keeps its own clock and holds requests back as vLLM's async
    scheduling does (``templates.ASYNC_GO``), for constants fitted in vLLM's loop that
    run in stock BLIS.
    """
    prog = _program(program)
    if scope not in SCOPES:
        raise ExportError(f"unknown constant scope {scope!r}; expected one of {SCOPES}")
    if not constants_by_group:
        raise ExportError("no constant groups to export")
    if scope == "global" and len(constants_by_group) != 1:
        raise ExportError(f"global scope needs exactly one constant group, got "
                          f"{sorted(constants_by_group)}")
    names = [s.name for s in prog.constants]
    for group, values in constants_by_group.items():
        missing = [n for n in names if n not in values]
        if missing:
            raise ExportError(f"constant group {group!r} has no value for {missing}")
    info = dict(scenario_info or {})
    prefix = type_prefix(prog.id)
    low = prefix[0].lower() + prefix[1:]
    fields = field_names(names)
    feat = dict(FEATURE_GO)
    attr_map = {("f", n): f"f.{g}" for n, g in feat.items()}
    attr_map.update({("c", n): f"c.{g}" for n, g in fields.items()})
    queue_map = {("c", n): f"c.{g}" for n, g in fields.items()}
    queue_map.update({("r", n): f"r.{g}" for n, g, _, _ in REQUEST_GO})
    tree: ast.Module = prog.tree
    fns = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "step_time" not in fns:
        raise ExportError("program has no step_time")
    step_lines = function_body(fns["step_time"], attr_map)
    queue_lines = (function_body(fns["queueing_time"], queue_map)
                   if "queueing_time" in fns else None)

    lookup, uses_strings = _lookup(prefix, low, scope, fields, constants_by_group, info)
    kernel_lines = kernels_lookup(low, dict(kernels or {}), _go_string)
    uses_strings = uses_strings or bool(kernels)
    out_expr, out_doc = _special("output_token_us", fields, low,
                                 "BLIS adds it to every token's ITL and to TTFT")
    post_expr, post_doc = _special("post_decode_us", fields, low, "BLIS adds it to E2E")
    if queue_lines is None:
        queue_body = "\treturn 0"
    else:
        width = max(len(g) for _, g, _, _ in REQUEST_GO) + 1  # gofmt aligns the values
        filled = "".join(f"\t\t{g + ':':<{width}} {expr},\n" for _, g, expr, _ in REQUEST_GO)
        queue_body = (f"\tr := {prefix}Request{{\n{filled}\t}}\n"
                      f"\treturn {low}QueueingTime(&r, &m.consts)")
    subs = {
        "ID": prog.id[:12], "NCONST": str(len(names)), "CNAMES": ", ".join(names) or "none",
        "BETAFIELDS": ", ".join(f"{g}: coeffs.BetaCoeffs[{i}]"
                                for i, g in enumerate(fields.values())),
        "QUEUEBODY": queue_body, "OUTDOC": out_doc, "OUTEXPR": out_expr,
        "POSTDOC": post_doc, "POSTEXPR": post_expr, "T": prefix, "t": low,
        "STEPBODY": (STEP_ASYNC if async_steps else STEP_PLAIN).replace("$t", low),
        "QUEUERET": (QUEUE_ASYNC if async_steps else QUEUE_PLAIN).replace("$t", low),
        "ASYNCFIELD": (f"\n\t// async is the clock that carries vLLM's async scheduling."
                       f"\n\tasync {low}Async" if async_steps else ""),
    }
    pattern = re.compile(r"\$(" + "|".join(sorted(subs, key=len, reverse=True)) + ")")

    def fill(text: str) -> str:
        return pattern.sub(lambda mt: subs[mt.group(1)], text)

    imports = ['\t"fmt"', '\t"math"', *(['\t"strings"'] if uses_strings else []), "",
               f'\t"{BLIS_REPO}/sim"']
    parts: list[str] = [
        *_header(prog, scope, sorted(constants_by_group), meta or {}, prefix, notes), "",
        "package latency", "", "import (", *imports, ")",
        fill(MODEL_DECL).rstrip("\n"), "", *lookup, "", *kernel_lines,
        fill(METHODS).rstrip("\n"), *([fill(ASYNC_GO).rstrip("\n")] if async_steps else []),
        fill(KERNEL_FUNCS).rstrip("\n"), "",
        f"// {low}StepTime is the program's step_time(f, c) in microseconds.",
        f"func {low}StepTime(f *{prefix}Features, c *{prefix}Consts) float64 {{",
        *("\t" + ln if ln else "" for ln in step_lines), "}", "",
    ]
    if queue_lines is not None:
        parts += [f"// {low}QueueingTime is the program's queueing_time(r, c) in microseconds.",
                  f"func {low}QueueingTime(r *{prefix}Request, c *{prefix}Consts) float64 {{",
                  *("\t" + ln for ln in queue_lines), "}", ""]
    glossary = {e.name: e for e in FEATURES}
    parts += _struct(f"{prefix}Arch", "is the model and GPU shape, in the order of"
                     " evaluator/features/components.py ARCH_FIELDS.", list(ARCH_GO))
    parts[-1:] = ["\t// Kernels is the packed measured kernel curves",
                  "\t// (evaluator/data/kernel_tables.py); nil for the roofline fallback.",
                  "\tKernels []float64", "}"]
    parts += ["", *_struct(
        f"{prefix}Consts", "are the program's constants (c.<name> in the program).",
        [(g, f"c.{n}") for n, g in fields.items()])]
    parts += ["", *_struct(
        f"{prefix}Features", "are the glossary features of one step (f.<name>).",
        [(g, f"f.{n} ({glossary[n].unit}): {glossary[n].formula}") for n, g in feat.items()])]
    parts += ["", *_struct(f"{prefix}Request", "is what queueing_time(r, c) reads of a request"
                           " and its server.",
                           [(g, f"r.{n}, {doc}") for n, g, _, doc in REQUEST_GO])]
    return "\n".join(parts) + "\n"
