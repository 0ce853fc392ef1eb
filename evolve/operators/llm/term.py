"""The *term* reply form: the model writes one expression, the operator adds it to the parent.

Why: asked for whole programs, SmolLM2-135M threw its parent away – every reply was a new
two-constant formula (``maximum(c.k0 + c.k1 * f.weight_read, ...)``) with none of the
parent's physics, and no such program came near its parent's loss (best 0.81 against 0.05
on seed 7; docs/notes/2026-12-06-llm-operator.md). A small model can still say *what is
missing* – which feature, in what shape – so in this form it writes only that::

    def term(f, c):
        return c.k0 * f.kv_read

and :func:`splice_term` returns the parent with ``+ (term)`` added to ``step_time``'s
return value, the term's constants renamed to fresh ``t1, t2, ...``. Constants the reply
does not declare (the term grammar has no ``CONSTANTS`` line) get the offline edits'
bounds for a new coefficient, by the unit of the features beside them (:func:`auto_decl`).
The child keeps everything the parent had, its constants starting at the parent's fitted
values, and a term that vanishes with its constants at their lower bound starts there: the
child's fit then starts at its parent's loss.

Untrusted text: the reply is parsed with ``ast`` only; what is spliced is the term's
expression tree and its constant triples, and the result goes through the same checker as
every other proposal. The model's docstring is not copied (the child's note is the term's
source, cut).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import numpy as np

from evolve.operators.llm.replies import FENCE, Extracted
from evolve.operators.offline import ast_edit as E
from evolve.operators.offline.mutations import DEFAULT_TERM_BOUNDS, TERM_BOUNDS, UNITS
from evolve.program.grammar_strict import TERM_CONSTANTS
from evolve.program.whitelist import MAX_CONSTANTS

TERM_FN = "term"
NOTE_PREFIX = "llm:term: "
MAX_NOTE_CHARS = 100


def extract_term(reply: str | None) -> Extracted:
    """The last fenced block of ``reply`` that defines ``term(f, c)``, or why there is none."""
    if reply is None or not reply.strip():
        return Extracted(None, "empty reply", "none")
    blocks = [body for _, body in FENCE.findall(reply) if f"def {TERM_FN}" in body]
    if not blocks:
        return Extracted(None, f"no ```python block with def {TERM_FN}(f, c) in the reply",
                         "none")
    text = blocks[-1].strip("\n") + "\n"
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return Extracted(None, f"reply term is not valid Python: line {exc.lineno}: "
                               f"{exc.msg}", "term")
    return Extracted(text, None, "term")


def term_room(n_constants: int) -> int:
    """Constants a term may bring to a parent with ``n_constants``: at most
    :data:`TERM_CONSTANTS`, and no more than the language's cap leaves (0: no room). Why
    count: without it, 12 of seed 7's 15 mixed-run LLM children (and 11 of seed 2's 21)
    came back with 11-13 constants and were refused unfitted."""
    return max(0, min(TERM_CONSTANTS, MAX_CONSTANTS - int(n_constants)))


def splice_term(parent_source: str, term_source: str,
                fitted: Mapping[str, Mapping[str, float]] | None = None
                ) -> tuple[str | None, str | None]:
    """``(child source, None)``: the parent with the term added to its step time; or
    ``(None, reason)`` when the term or the parent has an unexpected layout.

    ``fitted`` (group -> constant -> value, the parent's fitted constants): the parent's
    constants start at their median over groups, clipped to their bounds, so a term that
    starts at 0 starts the child at its parent's fit, not at the parent's declared inits
    (from which a child's short fit rarely gets back to where the parent was)."""
    try:
        parent = E.split_module(parent_source)
    except ValueError as exc:
        return None, f"parent: {exc}"
    for name, (_, low, high) in list(parent.constants.items()):
        values = [g[name] for _, g in sorted((fitted or {}).items()) if name in g]
        if values:
            parent.constants[name] = (float(np.clip(np.median(values), low, high)), low, high)
    term, consts, declared, error = _term_parts(term_source)
    if error:
        return None, error
    assert term is not None
    body = parent.step_fn().body
    last = body[-1] if body else None
    if not isinstance(last, ast.Return) or last.value is None:
        return None, "parent's step_time does not end in a return of a value"
    if _vanishes_at_zero(term, consts):  # start where adding it changes nothing
        consts = {k: (low, low, high) for k, (_, low, high) in consts.items()}
    else:  # an undeclared constant starts at 1 (a scale), a declared one where it said
        consts = {k: (1.0 if k not in declared else init, low, high)
                  for k, (init, low, high) in consts.items()}
    mapping: dict[str, str] = {}
    for name, decl in consts.items():
        fresh = E.fresh_name("t", parent.constants)
        parent.constants[fresh] = decl
        mapping[name] = fresh
    E.rename_consts(term, mapping)
    last.value = E.binop(last.value, ast.Add(), term)
    parent.doc = _with_note(parent.doc, NOTE_PREFIX + "+ " + E.short(term, 80))
    return parent.render(), None


_Parts = tuple[ast.expr | None, dict[str, E.ConstDecl], set[str], str | None]


def _term_parts(source: str) -> _Parts:
    """The term's returned expression, its constants (the declared ones, then the rest in
    order of first use, :func:`auto_decl`), the names it declared, or why not: the layout
    only, the checker judges the child."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return None, {}, set(), f"term is not valid Python: {exc.msg}"
    consts: dict[str, E.ConstDecl] = {}
    fn: ast.FunctionDef | None = None
    for stmt in tree.body:
        try:
            declared = E.constants_of(stmt)
        except ValueError as exc:
            return None, {}, set(), f"term {exc}"
        if declared is not None:
            consts = declared
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == TERM_FN:
            fn = stmt
    if fn is None:
        return None, {}, set(), f"no def {TERM_FN}(f, c) in the reply"
    body = [s for s in fn.body if not (isinstance(s, ast.Expr)
                                       and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None, {}, set(), f"{TERM_FN}(f, c) must be a single return of an expression"
    expr = body[0].value
    refs = list(dict.fromkeys(E.const_refs(expr)))
    out = {k: consts[k] for k in consts if k in refs}
    out.update({k: auto_decl(expr, k) for k in refs if k not in consts})
    return expr, out, set(consts) & set(refs), None


def auto_decl(expr: ast.expr, name: str) -> E.ConstDecl:
    """Bounds for constant ``name`` the term did not declare: those of the offline edits'
    new coefficient (:data:`TERM_BOUNDS`), by the unit of the features in the smallest
    part of ``expr`` holding both the constant and a feature – a scale on µs features,
    µs per request / token / layer otherwise. Its init is set by the splice."""
    parent: dict[ast.AST, ast.AST] = {}
    for up in ast.walk(expr):
        for child in ast.iter_child_nodes(up):
            parent[child] = up
    node: ast.AST | None = next((n for n in ast.walk(expr)
                                 if E.is_param_attr(n, E.CONST_PARAM) and n.attr == name),
                                None)
    while node is not None and not E.feature_nodes(node):
        node = parent.get(node)
    units = {UNITS.get(a.attr) for a in E.feature_nodes(node)} if node is not None else set()
    return TERM_BOUNDS["us"] if units == {"us"} else DEFAULT_TERM_BOUNDS


_BINARY = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply,
           ast.Div: np.divide, ast.Pow: np.power}
_CALLS = {"maximum": np.maximum, "minimum": np.minimum, "sqrt": np.sqrt, "log": np.log,
          "log1p": np.log1p, "exp": np.exp, "abs": np.abs}


def _vanishes_at_zero(term: ast.expr, consts: dict[str, E.ConstDecl]) -> bool:
    """Whether the term is exactly 0 with every constant at its lower bound, at two
    feature points: then the child starts as its parent (the offline edits' neutral start)
    instead of at the model's guessed inits, which put a term of the parent's whole size
    on top of it. ``where``/``clip`` and anything unknown answer no (inits kept)."""
    lows = {k: low for k, (_, low, _) in consts.items()}
    try:
        with np.errstate(all="ignore"):
            return all(float(_value(term, lows, x)) == 0.0 for x in (1.0, 1000.0))
    except (KeyError, ValueError, TypeError, OverflowError):
        return False


def _value(node: ast.AST, consts: dict[str, float], feature: float) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if E.is_param_attr(node, E.CONST_PARAM):
        return consts[node.attr]
    if E.is_param_attr(node, E.FEATURE_PARAM):
        return feature
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, consts, feature)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return float(_BINARY[type(node.op)](_value(node.left, consts, feature),
                                            _value(node.right, consts, feature)))
    name = E.call_name(node)
    if isinstance(node, ast.Call) and name in _CALLS:
        return float(_CALLS[name](*(_value(a, consts, feature) for a in node.args)))
    raise ValueError(f"not evaluated: {type(node).__name__}")


def _with_note(doc: str, note: str) -> str:
    """The parent's docstring without its ``llm:term`` notes, then this term's note."""
    lines = [ln for ln in doc.rstrip().splitlines() if not ln.startswith(NOTE_PREFIX)]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join([*lines, "", note[:MAX_NOTE_CHARS]] if lines else [note]) + "\n"
