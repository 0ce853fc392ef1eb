"""Go function bodies for a program's ``step_time`` and ``queueing_time``.

Why separate from :mod:`evolve.export.go.writer`: this is the part that depends on the program;
``go.py`` assembles the fixed scaffolding around it. Each Python statement becomes one Go
statement preceded by the Python line as a comment, ``where`` calls become named
temporaries, and assignments whose value is never read are dropped (Go refuses unused
variables; numpy would compute and discard them, which changes nothing).
"""

from __future__ import annotations

import ast
import re

from evolve.errors import ExportError
from evolve.export.go.expr import ExprTranslator, format_expr


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


GO_KEYWORDS = _words(
    "break case chan const continue default defer else fallthrough for func go goto if import "
    "interface map package range return select struct switch type var")
# Predeclared identifiers and names the generated functions use: shadowing them would
# compile but read badly, so locals with these names get a suffix.
GO_TAKEN = _words(
    "any append bool byte cap clear close complex copy delete error false float32 float64 imag "
    "int int64 iota len make max min new nil panic print println real recover rune string true "
    "uint math sim fmt strings f c r m")


def camel(name: str) -> str:
    """Go field name of a snake_case Python name: ``pf_gemm`` -> ``PfGemm``."""
    parts = [p for p in name.split("_") if p]
    out = "".join(p[:1].upper() + p[1:] for p in parts)
    if not out or not (out[0].isalpha() and out[0].isascii()):
        out = "C" + out
    return out


def field_names(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Distinct exported Go field names for Python names (suffix on collision)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for n in names:
        base = camel(n)
        go, i = base, 2
        while go in used:
            go, i = f"{base}{i}", i + 1
        used.add(go)
        out[n] = go
    return out


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _statements(fn: ast.FunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    for s in body[:-1]:
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)):
            raise ExportError(f"line {getattr(s, 'lineno', '?')}: only `name = expression`"
                              " assignments and a final return can be translated")
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        raise ExportError(f"{fn.name}: the last statement must be `return <expression>`")
    return body


def _live(body: list[ast.stmt]) -> list[ast.stmt]:
    """Drop assignments to names nothing kept reads (to a fixpoint)."""
    keep = list(body)
    while True:
        read: set[str] = set()
        for s in keep:
            read |= _reads(s.value)  # type: ignore[attr-defined]
        nxt = [s for s in keep if isinstance(s, ast.Return)
               or s.targets[0].id in read]  # type: ignore[attr-defined]
        if len(nxt) == len(keep):
            return keep
        keep = nxt


def _comment(text: str) -> str:
    return "// " + " ".join(text.split())


def function_body(fn: ast.FunctionDef, attr_map: dict[tuple[str, str], str]) -> list[str]:
    """Go statements (without indentation) computing ``fn``'s return value.

    ``attr_map`` maps ``(receiver, attribute)`` such as ``("c", "alpha")`` to Go text
    such as ``c.Alpha``; anything else is an :class:`ExportError`.
    """
    body = _live(_statements(fn))
    taken = set(GO_KEYWORDS) | set(GO_TAKEN)
    names: dict[str, str] = {}
    for s in body[:-1]:
        py = s.targets[0].id  # type: ignore[attr-defined]
        if py in names:
            continue
        go = py if py not in taken and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", py) else py + "V"
        while go in taken:
            go += "V"
        taken.add(go)
        names[py] = go

    def fresh(prefix: str) -> str:
        i = 1
        while f"{prefix}{i}" in taken:
            i += 1
        taken.add(f"{prefix}{i}")
        return f"{prefix}{i}"

    def attr(receiver: str, name: str) -> str:
        try:
            return attr_map[(receiver, name)]
        except KeyError:
            raise ExportError(f"{fn.name}: `{receiver}.{name}` is not available") from None

    defined: dict[str, str] = {}
    lines: list[str] = []
    for s in body:
        tr = ExprTranslator(attr, defined, fresh)
        value = tr.expr(s.value)  # type: ignore[attr-defined]
        lines.append(_comment(ast.unparse(s)))
        target = s.targets[0] if isinstance(s, ast.Assign) else None
        py = target.id if isinstance(target, ast.Name) else ""
        op = "=" if py in defined else ":="
        # `x = where(...)` assigns x in the if/else itself, unless the where reads x.
        direct = (py and isinstance(s.value, ast.Call) and tr.hoisted  # type: ignore[attr-defined]
                  and getattr(s.value.func, "id", "") == "where"  # type: ignore[attr-defined]
                  and py not in _reads(s.value))  # type: ignore[attr-defined]
        for j, h in enumerate(tr.hoisted):
            last = direct and j == len(tr.hoisted) - 1
            name, decl = (names[py], op) if last else (h.name, ":=")
            if last:
                taken.discard(h.name)  # not emitted: the next temporary may reuse it
            else:
                lines.append(_comment(f"{h.name} = {h.source}"))
            lines += [f"{name} {decl} {format_expr(h.b)}", f"if {format_expr(h.cond)} {{",
                      f"\t{name} = {format_expr(h.a)}", "}"]
        if isinstance(s, ast.Return):
            lines.append(f"return {format_expr(value)}")
            break
        defined[py] = names[py]
        if not direct:
            lines.append(f"{names[py]} {op} {format_expr(value)}")
    return lines
