"""Compile a checked program into numpy (teacher forcing) and numba (closed loop) functions.

Why build new trees instead of exec'ing the program: the checked AST is the only thing we
trust. Each generator below maps the (whitelisted) node kinds one to one onto fresh nodes:
``f.x`` becomes ``F[FEATURE_INDEX[x]]``, ``c.k`` becomes ``C[i]``, locals get a ``v_``
prefix, calls map to numpy (vector) or ``math``/helpers (scalar). The result is compiled
with ``compile()`` and exec'd in a namespace whose ``__builtins__`` is empty, holding only
numpy or math and the helpers. So the generated code cannot name anything else.

Numerics: the vector function runs under ``np.errstate(all="ignore")`` and its literals are
``np.float64`` (so ``1.0 / 0.0`` is ``inf``, never ``ZeroDivisionError``); the scalar
function is compiled with numba's ``error_model="numpy"`` for the same reason (its literals
are global floats, which numba freezes as constants, not foldable Python literals). Bad values
are caught afterwards by ``evaluator.api.step_time_problem`` (closed loop, teacher forced
and on the physics probes: one rule) and, for ``queueing_time``, by the evaluator's queue
check. ``maximum``/``minimum`` propagate NaN in
both forms, like numpy and Go's ``math.Max``.
"""

from __future__ import annotations

import ast
import copy
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numba
import numpy as np

from evaluator.api import FEATURE_INDEX, KERNEL_FEATURES, StepModel
from evolve.errors import ProgramError
from evolve.program.language import Program
from evolve.program.whitelist import QUEUE_FIELDS

QUEUE_INDEX = {name: i for i, name in enumerate(QUEUE_FIELDS)}
SCALAR_SIGNATURE = numba.float64(numba.float64[::1], numba.float64[::1])


@numba.njit(error_model="numpy")
def _maximum(a: float, b: float) -> float:
    if a != a or b != b:  # NaN propagates, as in np.maximum
        return a + b
    return a if a >= b else b


@numba.njit(error_model="numpy")
def _minimum(a: float, b: float) -> float:
    if a != a or b != b:
        return a + b
    return a if a <= b else b


def _call(name: str, args: list[ast.expr], module: str | None = None) -> ast.Call:
    func: ast.expr = ast.Name(name, ast.Load())
    if module is not None:
        func = ast.Attribute(ast.Name(module, ast.Load()), name, ast.Load())
    return ast.Call(func=func, args=args, keywords=[])


class _Translate(ast.NodeTransformer):
    """Shared mapping of attributes, locals and literals; calls differ per target."""

    def __init__(self, receiver: str, fields: dict[str, int], consts: dict[str, int]):
        self.receiver, self.fields, self.consts = receiver, fields, consts
        self.literals: dict[str, Any] = {}

    def literal(self, value: Any) -> ast.Name:
        """Literals become global names: CPython's constant folder would otherwise turn
        ``(-8.0) ** 0.5`` into a complex number or ``1.0 / 0.0`` into an exception."""
        name = f"k{len(self.literals)}"
        self.literals[name] = value
        return ast.Name(name, ast.Load())

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        assert isinstance(node.value, ast.Name)
        if node.value.id == "c":
            arr, idx = "C", self.consts[node.attr]
        else:
            assert node.value.id == self.receiver
            arr, idx = "F", self.fields[node.attr]
        return ast.Subscript(ast.Name(arr, ast.Load()), ast.Constant(idx), ast.Load())

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("v_" + node.id, node.ctx)


class _ToNumpy(_Translate):
    def visit_Constant(self, node: ast.Constant) -> ast.Name:
        return self.literal(np.float64(cast(float, node.value)))  # checked: a number

    def visit_Call(self, node: ast.Call) -> ast.Call:
        assert isinstance(node.func, ast.Name)
        return _call(node.func.id, [self.visit(a) for a in node.args], "np")


class _ToScalar(_Translate):
    def visit_Constant(self, node: ast.Constant) -> ast.Name:
        return self.literal(float(cast(float, node.value)))  # checked: a number

    def visit_Call(self, node: ast.Call) -> ast.expr:
        assert isinstance(node.func, ast.Name)
        name, args = node.func.id, [self.visit(a) for a in node.args]
        if name == "where":
            return ast.IfExp(test=args[0], body=args[1], orelse=args[2])
        if name in ("maximum", "minimum"):
            return _call("_" + name, args)
        if name == "clip":
            return _call("_minimum", [_call("_maximum", args[:2]), args[2]])
        if name == "abs":
            return _call("abs", args)
        return _call(name, args, "math")


def _generate(fn: ast.FunctionDef, tr: _Translate, name: str) -> ast.Module:
    body = [tr.visit(copy.deepcopy(s)) for s in fn.body]
    args = ast.arguments(posonlyargs=[], args=[ast.arg("F"), ast.arg("C")], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    gen = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None,
                          type_comment=None)
    if "type_params" in ast.FunctionDef._fields:  # Python >= 3.12
        gen.type_params = []  # type: ignore[attr-defined]
    return ast.fix_missing_locations(ast.Module(body=[gen], type_ignores=[]))


def _load(module: ast.Module, name: str, namespace: dict[str, Any], label: str) -> Callable:
    ns = {"__builtins__": {}, **namespace}
    exec(compile(module, f"<program {label}>", "exec"), ns)  # generated code only
    return ns[name]


def _vectorise(raw: Callable, label: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Wrap a generated numpy function: errors silenced, output a fresh float64 array.

    ``C`` is normally ``float64[n_const]`` -> ``float64[n]``. A population of constant
    vectors ``C[n_const, P, 1]`` gives ``float64[P, n]`` in one call (used by fitting).
    """

    def vector_fn(F: np.ndarray, C: np.ndarray) -> np.ndarray:
        C = np.asarray(C, dtype=np.float64)
        shape = (F.shape[-1],) if C.ndim <= 1 else (*C.shape[1:-1], F.shape[-1])
        out = np.empty(shape, dtype=np.float64)
        with np.errstate(all="ignore"):
            out[...] = raw(F, C)
        return out

    vector_fn.__name__ = vector_fn.__qualname__ = f"vector_fn_{label}"
    return vector_fn


@dataclass(frozen=True)
class CompiledProgram:
    """The three executable forms of a program and the generated sources (for debugging)."""

    vector_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
    scalar_fn: Any  # numba CPUDispatcher, float64(float64[::1], float64[::1])
    queue_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    vector_source: str
    scalar_source: str
    seconds: dict[str, float]  # "numpy", "numba", "queue": compile time of each part


def _numpy_step(program: Program) -> tuple[Callable[[np.ndarray, np.ndarray], np.ndarray],
                                             ast.Module]:
    label = program.id[:12]
    consts = {name: i for i, name in enumerate(program.const_names)}
    vec_tr = _ToNumpy("f", FEATURE_INDEX, consts)
    vec_mod = _generate(program.step_tree, vec_tr, "_vec")
    return (_vectorise(_load(vec_mod, "_vec", {"np": np, **vec_tr.literals}, label), label),
            vec_mod)


def _numpy_queue(program: Program) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    if program.queue_tree is None:
        return None
    label = program.id[:12]
    consts = {name: i for i, name in enumerate(program.const_names)}
    q_tr = _ToNumpy("r", QUEUE_INDEX, consts)
    q_mod = _generate(program.queue_tree, q_tr, "_queue")
    return _vectorise(_load(q_mod, "_queue", {"np": np, **q_tr.literals}, label),
                      label + "_queue")


def _model(program: Program, vector_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
           scalar_fn: object, queue_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
           ) -> StepModel:
    """The :class:`StepModel` of ``program``'s compiled forms (what it reads, where its
    E2E-only constants sit), built in one place for both compiled and numpy-only models."""
    return StepModel(name=program.id[:12], vector_fn=vector_fn, scalar_fn=scalar_fn,
                     queue_fn=queue_fn, post_decode_index=program.post_decode_index,
                     output_token_index=program.output_token_index,
                     reads_kernels=bool(program.features_read & KERNEL_FEATURES))


def numpy_model(program: Program) -> StepModel:
    """The program's numpy forms only (no numba: milliseconds instead of ~0.2 s), for
    what never simulates closed loop: fingerprints, which the search takes in the driver
    for every child before any is fitted. ``scalar_fn`` is None."""
    cached = _MODEL_CACHE.get(program.id)
    if cached is not None:
        return cached
    vector_fn, _mod = _numpy_step(program)
    return _model(program, vector_fn, None, _numpy_queue(program))


def compile_program(program: Program) -> CompiledProgram:
    """Generate, compile and (for numba) eagerly JIT the program's functions."""
    t0 = time.perf_counter()
    label = program.id[:12]
    consts = {name: i for i, name in enumerate(program.const_names)}
    vector_fn, vec_mod = _numpy_step(program)

    t1 = time.perf_counter()
    sca_tr = _ToScalar("f", FEATURE_INDEX, consts)
    sca_mod = _generate(program.step_tree, sca_tr, "_scalar")
    raw = _load(sca_mod, "_scalar", {"math": math, "abs": abs, "_maximum": _maximum,
                                     "_minimum": _minimum, **sca_tr.literals}, label)
    try:
        scalar_fn = numba.njit(SCALAR_SIGNATURE, error_model="numpy")(raw)
    except Exception as exc:  # a checked program should always compile; report if not
        raise ProgramError(f"numba could not compile the program: {exc}"[:500],
                           "compile") from None

    t2 = time.perf_counter()
    queue_fn = _numpy_queue(program)
    t3 = time.perf_counter()
    return CompiledProgram(vector_fn, scalar_fn, queue_fn, ast.unparse(vec_mod),
                           ast.unparse(sca_mod),
                           {"numpy": t1 - t0, "numba": t2 - t1, "queue": t3 - t2})


_MODEL_CACHE: OrderedDict[str, StepModel] = OrderedDict()
_MODEL_CACHE_SIZE = 256  # compiled numba functions are ~1 MB each; bound the memory


def step_model(program: Program) -> StepModel:
    """The compiled :class:`evaluator.api.StepModel` of ``program`` (numpy + numba).

    Cached by program id (least recently used first out): a program is compiled once per
    process however many times it is fitted, scored or fingerprinted.
    """
    model = _MODEL_CACHE.get(program.id)
    if model is None:
        try:
            comp = compile_program(program)
        except ProgramError:
            raise
        except Exception as exc:  # a checked program that does not compile is rejected
            raise ProgramError(f"cannot compile: {type(exc).__name__}: {str(exc)[:120]}",
                               "compile") from None
        model = _model(program, comp.vector_fn, comp.scalar_fn, comp.queue_fn)
        _MODEL_CACHE[program.id] = model
        while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
            _MODEL_CACHE.popitem(last=False)
    else:
        _MODEL_CACHE.move_to_end(program.id)
    return model
