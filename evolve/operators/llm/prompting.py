"""Rendering of the LLM prompts from the jinja2 templates in ``prompts/``.

Why templates plus a view model: the wording lives in ``prompts/*.jinja`` where it can be
edited and versioned (``TEMPLATE_VERSION`` is part of every cassette key, so editing a
template invalidates recorded replies instead of silently replaying stale ones), while this
module decides *what* the model may see. Two rules are enforced here, not merely followed:

* Only training errors reach a prompt. ``Parent.train_errors`` is the only metrics source,
  and when the caller names its held-out (validate/test) runs, a prompt that mentions any
  of them raises :class:`HeldoutLeak` – a bug in the caller, so it must stop the run.
* A prompt fits ``prompt_token_cap``: inspirations are dropped first, then the tables are
  shortened (worst-batches rows, best-fitting runs, constant groups), then it is an error.

Two profiles. ``full``: the language rules with the whole feature glossary, the parent(s)
with fitted constants, the training-error and worst-batches tables, and inspirations
(~5,000 tokens). ``compact`` (``compact_*.jinja``), for small context windows and slow
CPUs: the rules of the strict decoding form (:mod:`evolve.program.grammar_strict`) with feature
names only, the parent, its :data:`COMPACT_ERROR_ROWS` worst training runs and at most one
inspiration (a crossover's second parent takes that place) – under 1,500 tokens.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jinja2

from evaluator.api import FEATURES, MAX_STEP_US, PEAK_FLOPS
from evolve.assess.physics import FLOOR_CONTEXT, FLOOR_MARGIN
from evolve.assets import asset_dir
from evolve.operators.base import Parent
from evolve.operators.llm.term import term_room
from evolve.program.grammar_strict import TERM_CONSTANTS
from evolve.program.whitelist import CALL_ARITY, MAX_COMPLEXITY, MAX_CONSTANTS, MAX_WHERE

PROMPTS_DIR = asset_dir("prompts")
Kind = Literal["mutate", "crossover"]

# The language limits, read from the checker that enforces them on every reply, so the
# prompt cannot promise the model more than the loop accepts.
LANGUAGE = {
    "max_constants": MAX_CONSTANTS,
    "max_complexity": MAX_COMPLEXITY,
    "max_where": MAX_WHERE,
    "calls": tuple(CALL_ARITY),
    "token_budget": 2048,
    "hardware": f"H100 SXM, dense bf16 {PEAK_FLOPS / 1e12:.1f} TFLOP/s, HBM 3.35 TB/s, "
                "NVLink 900 GB/s",
}

# The rules the physics probe (evolve.assess.physics.violation) enforces on every fitted
# program, one line each, in the order it checks them: read from its constants, so the
# prompt states the thresholds the probe applies.
PHYSICS_RULES: tuple[str, ...] = (
    f"step time finite, positive and below {MAX_STEP_US:g} us on every batch",
    "never faster with more context (f.kv_sum, f.kv_max) or more scheduled tokens: more work "
    "never takes less time",
    f"at contexts >= {FLOOR_CONTEXT:g} tokens, at least {1 - FLOOR_MARGIN:.0%} of the memory "
    "floor f.weight_read + f.kv_read (e.g. maximum(e, c.k * (f.weight_read + f.kv_read)))",
    f"at contexts >= {FLOOR_CONTEXT:g} tokens, step time grows with context by at least "
    f"{1 - FLOOR_MARGIN:.0%} of what f.k_dc_attn grows by (e.g. + c.k * f.k_dc_attn, k >= 1)",
)
MAX_REJECTIONS = 3  # a parent's rejection reasons shown, most recent
MAX_REJECTION_CHARS = 160

# Training-error columns shown per run, in this order, when present (RunMetrics.ape keys).
ERROR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("e2e_mean", "E2E mean APE"),
    ("ttft_mean", "TTFT mean APE"),
    ("itl_mean", "ITL mean APE"),
)


COMPACT_ERROR_ROWS = 3
COMPACT_TOKEN_CAP = 1500  # real tokens the compact profile stays under
# ...enforced on the *estimate* with a margin: small-vocabulary tokenizers split digits one
# by one, and SmolLM2 counted 1,537 tokens where estimate_tokens said 1,331.
COMPACT_ESTIMATE_CAP = 1200
# rows of where the parent errs most (sim / meas) in a term prompt: none, since with run
# names each row is ~60 tokens and the table was 45 % of a term prompt's user part, which
# llama.cpp reads anew on every request (the system part is reused)
TERM_BATCH_ROWS = 0
# a run name's date-time prefix (``20260217-231439-``): the model needs the run, not when
_RUN_STAMP = re.compile(r"(?<![\w.-])\d{8}-\d{6}-(?=[a-z])")
# a fitting window's suffix (``@840-960s``): in a term prompt each run has one window
_WINDOW = re.compile(r"@\d+-\d+s\b")
Profile = Literal["full", "compact"]


class HeldoutLeak(AssertionError):
    """A prompt would show a validate/test run: selection must never see held-out data."""


class PromptTooLarge(ValueError):
    """Even the smallest rendering of a prompt exceeds ``prompt_token_cap``."""


def _template_files() -> list[Path]:
    return sorted(PROMPTS_DIR.glob("*.jinja"))


def _template_version() -> str:
    digest = hashlib.sha256()
    for path in _template_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


TEMPLATE_VERSION: str = _template_version()


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)
    # a training run priced without its model (evolve.search.transfer): said what it is
    env.tests["lomo"] = lambda name: str(name).endswith("~lomo")
    return env


_PIECES = re.compile(r"[A-Za-z]+|\d+|\n|[ \t]+|[^\sA-Za-z\d]+")


def estimate_tokens(text: str) -> int:
    """Rough BPE token count, meant to over- rather than under-estimate.

    ``len/4`` under-counts exactly what prompts here are full of – digits, identifiers with
    underscores, table pipes – so: words ~1 token per 6 letters, digits 1 per 3, newlines 1,
    indentation runs 1, punctuation 1 per 2 characters.
    """
    n = 0
    for m in _PIECES.finditer(text):
        s = m.group()
        c = s[0]
        if c.isalpha():
            n += max(1, math.ceil(len(s) / 6))
        elif c.isdigit():
            n += math.ceil(len(s) / 3)
        elif c == "\n":
            n += 1
        elif c in " \t":
            n += 0 if s == " " else 1
        else:
            n += math.ceil(len(s) / 2)
    return n


@lru_cache(maxsize=1)
def system_prompt() -> str:
    """The language rules and the feature glossary (identical for every request)."""
    return _env().get_template("system.jinja").render(
        features=FEATURES, physics_rules=PHYSICS_RULES, **LANGUAGE).strip()


@dataclass(frozen=True)
class Prompt:
    """Rendered chat messages plus what was cut to fit the cap (stored for diagnosis).

    ``cuts``: {"inspirations" | "batch_rows" | "error_rows" | "const_groups": how many of
    them were dropped}; empty when the full prompt fitted.
    """

    kind: Kind
    messages: list[dict[str, str]]
    tokens: int
    cuts: dict[str, int] = field(default_factory=dict)


@dataclass
class _Limits:
    """How much of each shrinkable part is kept; shrunk step by step until the prompt fits."""

    inspirations: int
    batch_rows: int
    error_rows: int
    const_groups: int

    def shrink(self) -> bool:
        """One step down in the documented order; False when nothing is left to cut."""
        if self.inspirations > 0:
            self.inspirations -= 1
        elif self.batch_rows > 0:
            self.batch_rows //= 2
        elif self.error_rows > 1:
            self.error_rows //= 2
        elif self.const_groups > 1:
            self.const_groups //= 2
        else:
            return False
        return True


_BIG = 1 << 30  # sorts non-finite errors as worst


@lru_cache(maxsize=1)
def compact_system_prompt(form: str = "program") -> str:
    """The compact profile's rules: the strict decoding form (or the term form's) and the
    feature names."""
    name = "term_system.jinja" if form == "term" else "compact_system.jinja"
    return _env().get_template(name).render(
        features=FEATURES, physics_rules=PHYSICS_RULES, max_term_constants=TERM_CONSTANTS,
        **LANGUAGE).strip()


def build_prompt(kind: Kind, parents: Sequence[Parent], inspirations: Sequence[Parent],
                 cap: int, heldout: Collection[str] = (), profile: str = "full",
                 form: str = "program") -> Prompt:
    """Render the messages for one request, shrunk to ``cap`` estimated tokens.

    ``parents``: one (mutate) or two (crossover). ``heldout``: names of validate/test runs;
    any of them in the parents' errors or anywhere in the prompt raises :class:`HeldoutLeak`.
    ``profile``: ``full`` or ``compact`` (module doc). ``form = "term"``: the model is
    asked for one term to add to the first parent (:mod:`evolve.operators.llm.term`), in
    the compact layout whatever the profile.
    """
    need = 1 if kind == "mutate" else 2
    if len(parents) != need:
        raise ValueError(f"{kind} needs {need} parent(s), got {len(parents)}")
    _check_errors_are_training(parents, heldout)
    if profile == "compact" or form == "term":
        return _compact(kind, parents, inspirations, cap, heldout, form)
    system = system_prompt()
    sys_tokens = estimate_tokens(system)
    limits = _Limits(
        inspirations=len(inspirations),
        batch_rows=max(len(p.worst_batches.strip().splitlines()) for p in parents),
        error_rows=len({n for p in parents for n in p.train_errors}),
        const_groups=max(len(p.constants) for p in parents))
    start = _Limits(**vars(limits))
    user = _render_user(kind, parents, inspirations, limits)
    while sys_tokens + estimate_tokens(user) > cap:
        if not limits.shrink():
            raise PromptTooLarge(
                f"{kind} prompt needs {sys_tokens + estimate_tokens(user)} tokens even with "
                f"nothing optional left; prompt_token_cap is {cap}")
        user = _render_user(kind, parents, inspirations, limits)
    _check_no_heldout(system + "\n" + user, heldout)
    cuts = {k: getattr(start, k) - v for k, v in vars(limits).items() if v != getattr(start, k)}
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return Prompt(kind, messages, sys_tokens + estimate_tokens(user), cuts)


def _compact(kind: Kind, parents: Sequence[Parent], inspirations: Sequence[Parent],
             cap: int, heldout: Collection[str], form: str = "program") -> Prompt:
    """The compact profile: one parent, its worst runs, at most one other program (the
    term form: the programs' functions only, run names without their date-time prefix,
    and :data:`TERM_BATCH_ROWS` rows of where the parent errs most)."""
    system = compact_system_prompt(form)
    cap = min(cap, COMPACT_ESTIMATE_CAP)
    others = list(parents[1:]) or list(inspirations[:1])
    rows = COMPACT_ERROR_ROWS
    batch_rows = TERM_BATCH_ROWS if form == "term" else 0
    template = "term_mutate.jinja" if form == "term" else "compact_mutate.jinja"
    used = parents[0].program.n_constants  # a term may bring only what the cap leaves
    while True:
        (columns, table), _ = _error_rows(parents[:1], rows)
        columns = columns[:2]  # E2E and TTFT: what the loss is made of
        table = [dict(r, cells=r["cells"][:2]) for r in table]
        if form == "term":
            table = _term_rows(table)
        view = _functions_only if form == "term" else _short_doc
        other = view(_program_view(others[0])) if others else None
        user = _env().get_template(template).render(
            parent=dict(view(_program_view(parents[0])), error_columns=columns,
                        error_rows=table, signed=_signed(parents[:1])), inspiration=other,
            batches=_cut_table(parents[0].worst_batches, batch_rows) if batch_rows else "",
            used=used, room=term_room(used), max_constants=MAX_CONSTANTS,
            max_term_constants=TERM_CONSTANTS)
        user = re.sub(r"\n{3,}", "\n\n", user).strip()
        tokens = estimate_tokens(system) + estimate_tokens(user)
        if tokens <= cap:
            break
        if others:
            others = []
        elif batch_rows > 0:
            batch_rows -= 1
        elif rows > 0:
            rows -= 1
        else:
            raise PromptTooLarge(f"compact {kind} prompt needs {tokens} tokens; "
                                 f"prompt_token_cap is {cap}")
    _check_no_heldout(system + "\n" + user, heldout)
    if form == "term":
        user = _RUN_STAMP.sub("", user)
        _check_no_heldout(user, {_run_label(name) for name in heldout})
        tokens = estimate_tokens(system) + estimate_tokens(user)
    cuts = {"error_rows": COMPACT_ERROR_ROWS - rows} if rows < COMPACT_ERROR_ROWS else {}
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return Prompt(kind, messages, tokens, cuts)


def _run_label(name: str) -> str:
    """A run as a term prompt names it: without its date-time prefix and window suffix."""
    return _WINDOW.sub("", _RUN_STAMP.sub("", name))


def _term_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The error rows of a term prompt: run labels (:func:`_run_label`, unless two rows
    would share one) and whole percents. Why: digits are a token each in SmolLM2's
    vocabulary, and the table was 160 of a term prompt's ~400 user tokens, which llama.cpp
    reads anew on every request; a sign and a size are what a term can act on."""
    labels = [_run_label(r["name"]) for r in rows]
    if len(set(labels)) < len(labels):
        labels = [r["name"] for r in rows]
    return [dict(r, name=label, cells=[_WHOLE.sub(_whole, c) for c in r["cells"]])
            for r, label in zip(rows, labels, strict=True)]


_WHOLE = re.compile(r"([+-]?)(\d+\.\d+)%")


def _whole(m: re.Match[str]) -> str:
    """``+35.4%`` -> ``+35%``, ``97.6%`` -> ``98%`` (a sign only where there was one)."""
    return f"{m.group(1)}{round(float(m.group(2)))}%"


_DOC = re.compile(r'\A(\s*)("""|\'\'\')(.*?)\2', re.DOTALL)


def _short_doc(view: dict[str, Any]) -> dict[str, Any]:
    """The view with the program's docstring cut to its first line (seeds carry long ones)."""
    m = _DOC.match(view["source"])
    if m:
        first = m.group(3).strip().splitlines()[0] if m.group(3).strip() else ""
        view = dict(view, source=f'{m.group(1)}"""{first}"""' + view["source"][m.end():])
    return view


def _functions_only(view: dict[str, Any]) -> dict[str, Any]:
    """The term form's view of a program: its functions, without docstring or
    ``CONSTANTS`` – what a term is added to (the term's own constants are declared by the
    splice), at about a third fewer prompt tokens than the whole module."""
    source = view["source"]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _short_doc(view)
    parts = [ast.get_source_segment(source, s) for s in tree.body
             if isinstance(s, ast.FunctionDef)]
    return dict(view, source="\n\n".join(p for p in parts if p))


def _render_user(kind: Kind, parents: Sequence[Parent], inspirations: Sequence[Parent],
                 limits: _Limits) -> str:
    insp = [_program_view(p) for p in inspirations[: limits.inspirations]]
    views = [_parent_view(p, limits) for p in parents]
    if kind == "mutate":
        view = views[0]
        table, dropped = _error_rows([parents[0]], limits.error_rows)
        view.update(error_columns=table[0], error_rows=table[1], rows_dropped=dropped,
                    signed=_signed(parents))
        text = _env().get_template("mutate.jinja").render(parent=view, inspirations=insp)
    else:
        (columns, rows), dropped = _error_rows(parents, limits.error_rows)
        text = _env().get_template("crossover.jinja").render(
            a=views[0], b=views[1], error_columns=columns, error_rows=rows,
            rows_dropped=dropped, signed=_signed(parents), inspirations=insp)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _program_view(p: Parent) -> dict[str, Any]:
    prog = p.program
    return {"source": str(prog.source), "complexity": int(prog.complexity),
            "loss": _fmt_loss(p.loss), "short_id": str(prog.id)[:10],
            "rejections": rejection_lines(p.rejections)}


def rejection_lines(reasons: Sequence[str]) -> list[str]:
    """The last :data:`MAX_REJECTIONS` distinct reasons, each one line, cut to
    :data:`MAX_REJECTION_CHARS` (a physics reason names synthetic batches only)."""
    out: list[str] = []
    for why in reversed(list(reasons)):
        line = " ".join(str(why).split())[:MAX_REJECTION_CHARS]
        if line and line not in out:
            out.append(line)
        if len(out) >= MAX_REJECTIONS:
            break
    return out[::-1]


def _parent_view(p: Parent, limits: _Limits) -> dict[str, Any]:
    view = _program_view(p)
    groups = sorted(p.constants.items())
    rows = [{"group": g, "text": ", ".join(f"{k}={_fmt_num(v)}" for k, v in vals.items())}
            for g, vals in groups[: limits.const_groups]]
    view["constants"] = {"rows": rows, "dropped": len(groups) - len(rows)}
    keys = [g for g, _ in groups]
    view["scope_note"] = ("one global set" if keys == ["global"] or not keys
                          else f"one set per group, {len(keys)} groups")
    view["worst_batches"] = _cut_table(p.worst_batches, limits.batch_rows)
    return view


def _error_rows(parents: Sequence[Parent], max_rows: int
                ) -> tuple[tuple[list[str], list[dict[str, Any]]], int]:
    """Columns and rows of the training-error table, worst run of the first parent first."""
    present = [(k, label) for k, label in ERROR_COLUMNS
               if any(k in m for p in parents for m in p.train_errors.values())]
    first = parents[0].train_errors
    names = sorted({n for p in parents for n in p.train_errors},
                   key=lambda n: (-_worst(first.get(n, {})), n))
    tag = len(parents) > 1
    columns = [f"{who} {label}" if tag else label
               for who in ("AB"[: len(parents)]) for _, label in present]
    rows = [{"name": n, "cells": [_fmt_ape(p.train_errors.get(n, {}), k)
                                  for p in parents for k, _ in present]}
            for n in names[:max_rows]]
    return (columns, rows), len(names) - len(rows)


def _signed(parents: Sequence[Parent]) -> bool:
    """Whether any error row carries ``pred_<key>``/``meas_<key>`` (so APEs get a sign)."""
    return any(f"pred_{k}" in m and f"meas_{k}" in m for p in parents
               for m in p.train_errors.values() for k, _ in ERROR_COLUMNS)


def _worst(metrics: Mapping[str, float]) -> float:
    vals = [float(metrics[k]) for k, _ in ERROR_COLUMNS[:2] if k in metrics]
    vals = [v if math.isfinite(v) else _BIG for v in vals]
    return max(vals, default=-1.0)


def _cut_table(text: str, max_rows: int) -> str:
    """Keep the header (and a markdown separator line) plus ``max_rows`` rows."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines or max_rows >= len(lines):
        return "\n".join(lines)
    head = 2 if len(lines) > 1 and set(lines[1].replace("|", "").strip()) <= set("-: ") else 1
    body = lines[head:]
    if max_rows <= 0:
        return ""
    kept = body[:max_rows]
    return "\n".join([*lines[:head], *kept, f"... ({len(body) - len(kept)} more rows omitted)"])


def _check_errors_are_training(parents: Sequence[Parent], heldout: Collection[str]) -> None:
    bad = sorted({n for p in parents for n in p.train_errors if n in set(heldout)})
    if bad:
        raise HeldoutLeak(f"Parent.train_errors holds held-out run(s) {', '.join(bad)}: only "
                          "training errors may reach a prompt")


def _check_no_heldout(text: str, heldout: Collection[str]) -> None:
    for name in sorted(heldout):
        if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text):
            raise HeldoutLeak(f"prompt mentions held-out run {name!r}")


def _fmt_ape(metrics: Mapping[str, float], key: str) -> str:
    """APE in percent; signed (+ = simulated slower than measured) when the row also has
    ``pred_<key>`` and ``meas_<key>``, which tells the model which way to correct."""
    v = metrics.get(key)
    if v is None:
        return "-"
    v = float(v)
    if not math.isfinite(v):
        return "invalid"
    pred, meas = metrics.get(f"pred_{key}"), metrics.get(f"meas_{key}")
    if pred is None or meas is None or not math.isfinite(float(pred) - float(meas)):
        return f"{100 * v:.1f}%"
    return f"{100 * v:+.1f}%" if float(pred) >= float(meas) else f"{-100 * v:+.1f}%"


def _fmt_loss(v: float) -> str:
    v = float(v)
    return f"{v:.4f}" if math.isfinite(v) else "not yet scored"


def _fmt_num(v: float) -> str:
    return f"{float(v):.4g}"
