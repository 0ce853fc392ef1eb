"""Program text the language and codegen tests share: a module around a step_time body,
and one good program that uses most of the language."""

from __future__ import annotations

import textwrap

HEAD = 'CONSTANTS = {"a": (1.0, 0.0, 10.0)}\n'


def prog(body: str, consts: str = HEAD, doc: str = '"""doc"""\n') -> str:
    """A module with a step_time whose body is ``body`` (indented for you)."""
    return doc + consts + "def step_time(f, c):\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ") + "\n"



GOOD = prog("""
    \"\"\"function docstrings are dropped\"\"\"
    compute = c.a * (f.pf_gemm + f.pf_attn)
    memory = f.weight_read + f.kv_read
    t = where(f.prefill_tokens > 0, maximum(compute, memory), memory)
    return clip(t, 1.0, 1e9) + sqrt(f.tp) + log1p(f.layers) + abs(-c.b) ** 2
""", consts='CONSTANTS = {"b": (100, 1, 1e4), "a": (1.5, 0.1, 10), "unused": (1, 0, 2)}\n')
