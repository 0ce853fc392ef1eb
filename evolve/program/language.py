"""The program language: parse, check, normalise and identify step-time programs.

A program is a small Python module (see ``docs/architecture.md``, "A program")::

    \"\"\"Idea in one line.\"\"\"
    CONSTANTS = {"a": (1.0, 0.0, 10.0), "b": (100.0, 1.0, 1e4)}

    def step_time(f, c):
        x = c.a * f.pf_gemm
        return maximum(x, f.weight_read) + c.b

    def queueing_time(r, c):          # optional, per request
        return c.b

Why this shape: the search (LLM and offline operators) writes programs as text, so the text
is untrusted. :func:`parse_program` checks the whole AST against a whitelist
(:mod:`evolve.program.whitelist`) *before* anything executes, then normalises it (constants sorted,
numbers as floats, unused constants and function docstrings dropped) so that two
formattings of one program share one id, the sha256 of the normalised source. Compilation
(:mod:`evolve.program.codegen`) builds fresh ASTs from the checked tree; user text is never exec'd.
"""

from __future__ import annotations

import ast
import codecs
import copy
import hashlib
import inspect
import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from evolve.program.whitelist import (
    CALL_ARITY,
    MAX_COMPLEXITY,
    MAX_CONSTANTS,
    MAX_SOURCE_CHARS,
    MAX_WHERE,
    POW_RANGE,
    SPECIAL_CONSTANTS,
    Checked,
    ConstSpec,
    FunctionInfo,
    ProgramError,
    check_tree,
)

codecs.lookup("utf-8-sig")  # its codec module is imported now, never while a program is checked

__all__ = [
    "CALL_ARITY", "MAX_COMPLEXITY", "MAX_CONSTANTS", "MAX_WHERE", "POW_RANGE",
    "SPECIAL_CONSTANTS", "ConstSpec", "Program", "ProgramError", "parse_program",
]

@dataclass(frozen=True, eq=False)
class Program:
    """A checked, normalised program: plain data. Equality and hashing are by ``id``.

    Built only by :func:`parse_program` (checking); compiled only by
    :func:`evolve.program.codegen.step_model` (compiling). The fields are the normalised source,
    its sha256 ``id`` and what the checker measured (metadata); ``tree`` is a cached
    ``ast.parse(source)``, read by the Go exporter and the compiler: treat it as read-only
    (``copy.deepcopy`` before changing). ``constants`` are sorted by name; that order is
    the layout of the vector ``c``.
    """

    id: str
    source: str
    doc: str
    constants: tuple[ConstSpec, ...]
    complexity: int
    features: frozenset[str]
    n_where: int

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @cached_property
    def tree(self) -> ast.Module:
        """The normalised module (parsed once per instance)."""
        return ast.parse(self.source)

    @property
    def const_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.constants)

    @property
    def n_constants(self) -> int:
        return len(self.constants)

    def init_vector(self) -> np.ndarray:
        return np.array([s.init for s in self.constants], dtype=np.float64)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` vectors in the order of ``c``."""
        return (np.array([s.low for s in self.constants], dtype=np.float64),
                np.array([s.high for s in self.constants], dtype=np.float64))

    def _def(self, name: str) -> ast.FunctionDef | None:
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None

    @property
    def step_tree(self) -> ast.FunctionDef:
        """The normalised ``def step_time(f, c)`` node."""
        node = self._def("step_time")
        assert node is not None
        return node

    @property
    def queue_tree(self) -> ast.FunctionDef | None:
        """The normalised ``def queueing_time(r, c)`` node, or None."""
        return self._def("queueing_time")

    @property
    def features_read(self) -> frozenset[str]:
        """The ``f.<name>`` features ``step_time`` reads."""
        return frozenset(n.attr for n in ast.walk(self.step_tree)
                         if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                         and n.value.id == "f")

    def _index(self, name: str) -> int | None:
        names = self.const_names
        return names.index(name) if name in names else None

    @property
    def post_decode_index(self) -> int | None:
        return self._index("post_decode_us")

    @property
    def output_token_index(self) -> int | None:
        return self._index("output_token_us")


class _Floats(ast.NodeTransformer):
    """Integer literals become floats, so ``2`` and ``2.0`` normalise alike."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if type(node.value) is int:
            return ast.Constant(float(node.value))
        return node


def _function(name: str, params: tuple[str, str], info: FunctionInfo) -> ast.FunctionDef:
    args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    body = [_Floats().visit(copy.deepcopy(s)) for s in info.body]
    fn = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None,
                         type_comment=None)
    if "type_params" in ast.FunctionDef._fields:  # Python >= 3.12
        fn.type_params = []  # type: ignore[attr-defined]
    return fn


def _normalise(chk: Checked) -> tuple[str, str]:
    """Normalised source and cleaned docstring of a checked program."""
    body: list[ast.stmt] = []
    doc = inspect.cleandoc(chk.doc) if chk.doc else ""
    if doc:
        body.append(ast.Expr(ast.Constant(doc)))
    keep = sorted(n for n in chk.constants
                  if n in chk.used_constants or n in SPECIAL_CONSTANTS)
    consts = ast.Dict(
        keys=[ast.Constant(n) for n in keep],
        values=[ast.Tuple([ast.Constant(float(v)) for v in (chk.constants[n].init,
                                                           chk.constants[n].low,
                                                           chk.constants[n].high)],
                          ast.Load()) for n in keep])
    body.append(ast.Assign([ast.Name("CONSTANTS", ast.Store())], consts))
    body.append(_function("step_time", ("f", "c"), chk.step))
    if chk.queue is not None:
        body.append(_function("queueing_time", ("r", "c"), chk.queue))
    module = ast.Module(body=body, type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)) + "\n", doc


def _rule_of(exc: Exception) -> str:
    """The rule a stray exception of the checker breaks (an oversized literal, or depth)."""
    if isinstance(exc, OverflowError):
        return "literal"
    if isinstance(exc, RecursionError | MemoryError):
        return "size"
    return "check"


def parse_program(text: str | bytes) -> Program:
    """Check and normalise a program; raise :class:`ProgramError` on any violation.

    Nothing in ``text`` is executed: this only parses to an AST and walks it.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")  # a BOM, as editors on Windows save, is no code
        except UnicodeDecodeError as exc:
            raise ProgramError(f"source is not valid UTF-8 ({exc.reason} at byte "
                               f"{exc.start})", "encoding") from None
    if not isinstance(text, str):
        raise ProgramError(f"source must be str or bytes, not {type(text).__name__}",
                           "encoding")
    if len(text) > MAX_SOURCE_CHARS:
        raise ProgramError(f"source has {len(text)} characters; at most {MAX_SOURCE_CHARS}",
                           "size")
    try:
        with warnings.catch_warnings():  # untrusted text: its invalid escapes are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="exec")
    except SyntaxError as exc:
        raise ProgramError(f"syntax error: {exc.msg}", "syntax", exc.lineno,
                           (exc.text or "").strip()[:80]) from None
    except ValueError as exc:  # e.g. NUL bytes
        raise ProgramError(f"cannot parse: {exc}", "syntax") from None
    except (RecursionError, MemoryError) as exc:  # the parser's own nesting limits
        raise ProgramError(f"too deeply nested to parse ({type(exc).__name__})",
                           "size") from None
    try:
        chk = check_tree(tree)
        source, doc = _normalise(chk)
    except ProgramError:
        raise
    except Exception as exc:  # untrusted text must end in a rejection, never a crash
        raise ProgramError(f"cannot check: {type(exc).__name__}: {str(exc)[:120]}",
                           _rule_of(exc)) from None
    names = sorted(n for n in chk.constants
                   if n in chk.used_constants or n in SPECIAL_CONSTANTS)
    return Program(
        id=hashlib.sha256(source.encode("utf-8")).hexdigest(), source=source, doc=doc,
        constants=tuple(chk.constants[n] for n in names), complexity=chk.complexity,
        features=frozenset(chk.features), n_where=chk.n_where)
