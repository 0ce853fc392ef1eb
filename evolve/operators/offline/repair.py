"""Repair edits: the offline fixes for a program that failed the physics probe or the fit.

Why: a small LLM writes valid programs that mostly fail the physics probe
(:mod:`evolve.assess.physics`) – typically "step time grows by 0.0 us ... less than 90 %
of what the decode-attention kernel adds" (no context term) or "undercuts the physical
floor" (no memory term). Those programs often carry a useful structure that one edit makes
physical, so before such a child is given up the loop tries a bounded number of these
edits, each a child of its own (parent: the failed program; operator ``repair:<edit>``).

The edits wrap the ``return`` value ``e`` of ``step_time``; every new constant starts
where the probe's rule holds (a coefficient of 1 on the hardware terms), bounded [0, 10]:

* ``context_term``  – ``e + c.rN * f.k_dc_attn``: a step prices its decode attention at
  the measured kernel's rate (check 4: the slope in context);
* ``memory_floor``  – ``maximum(e, c.rN * (f.weight_read + f.kv_read))``: no step is faster
  than reading the weights and the KV cache once (check 3);
* ``floor_context`` – both: ``maximum(e + c.rN * f.k_dc_attn, c.rM * (f.weight_read + f.kv_read))``.

Which come first depends on the rejection reason; the edits are pure functions of the
source and the reason (no random draw), so a repair is the same in every run.
"""

from __future__ import annotations

import ast

from evolve.operators.offline import ast_edit as E

REPAIR_BOUNDS: E.ConstDecl = (1.0, 0.0, 10.0)
PREFIX = "repair:"
NOTE_PREFIX = "offline:"
KINDS = ("context_term", "memory_floor", "floor_context")


def order(reason: str) -> tuple[str, ...]:
    """The repair edits to try for a rejection ``reason``, most likely first."""
    if "grows by" in reason:  # the context slope (check 4)
        return ("context_term", "floor_context", "memory_floor")
    if "physical floor" in reason:  # the level (check 3)
        return ("memory_floor", "floor_context", "context_term")
    return ("floor_context", "memory_floor", "context_term")


def repairable(reason: str) -> bool:
    """Whether a rejection after fitting is one a repair edit may fix: the physics probe,
    a failed fit, a program invalid (non-finite, negative) on a training run."""
    return reason.startswith(("physics", "fit failed", "invalid on", "non-finite"))


def _floor(parts: E.ModuleParts) -> ast.expr:
    r = E.fresh_name("r", parts.constants)
    parts.constants[r] = REPAIR_BOUNDS
    memory = E.binop(E.attr(E.FEATURE_PARAM, "weight_read"), ast.Add(),
                     E.attr(E.FEATURE_PARAM, "kv_read"))
    return E.binop(E.attr(E.CONST_PARAM, r), ast.Mult(), memory)


def _context(parts: E.ModuleParts, e: ast.expr) -> ast.expr:
    r = E.fresh_name("r", parts.constants)
    parts.constants[r] = REPAIR_BOUNDS
    term = E.binop(E.attr(E.CONST_PARAM, r), ast.Mult(), E.attr(E.FEATURE_PARAM, "k_dc_attn"))
    return E.binop(e, ast.Add(), term)


def repair(source: str, kind: str) -> str | None:
    """``source`` with repair edit ``kind`` applied, or None when it cannot be (no
    ``return`` in ``step_time``, an unreadable module)."""
    if kind not in KINDS:
        raise ValueError(f"unknown repair {kind!r}; one of {', '.join(KINDS)}")
    try:
        parts = E.split_module(source)
    except ValueError:
        return None
    ret = next((s for s in reversed(parts.step_fn().body) if isinstance(s, ast.Return)), None)
    if ret is None or ret.value is None:
        return None
    e = ret.value
    if kind == "context_term":
        ret.value = _context(parts, e)
    elif kind == "memory_floor":
        ret.value = E.call("maximum", e, _floor(parts))
    else:
        ret.value = E.call("maximum", _context(parts, e), _floor(parts))
    doc = parts.doc.rstrip()
    parts.doc = (doc + "\n\n" if doc else "") + f"{NOTE_PREFIX}{PREFIX}{kind}\n"
    return parts.render()


def repairs(source: str, reason: str, limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` (operator name, repaired source) for a program rejected with
    ``reason`` after fitting; none when the reason is not one a repair may fix."""
    if limit <= 0 or not repairable(reason):
        return []
    out = []
    for kind in order(reason):
        fixed = repair(source, kind)
        if fixed is not None and fixed != source:
            out.append((f"{PREFIX}{kind}", fixed))
        if len(out) >= limit:
            break
    return out
