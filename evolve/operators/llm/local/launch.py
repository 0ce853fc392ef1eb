"""Entry point of the llama-cpp-python server that :mod:`evolve.operators.llm.local.server` starts.

Why not ``python -m llama_cpp.server`` directly: llama.cpp repacks quantised weights into
"extra" CPU buffer types (AMX, AVX-512 layouts) when the CPU has them, and in
llama-cpp-python 0.3.x that path crashes the process (SIGSEGV in ``llama_decode``) on the
first batch of more than one token on AMX CPUs – i.e. on every chat request. The model
parameter that turns the repacking off (``use_extra_bufts``) is not exposed by
``llama_cpp.Llama`` or the server's flags, so this wrapper sets it in the default model
parameters and then runs the server's own ``main`` with the arguments it was given.
"""

from __future__ import annotations

from typing import Any


def _no_extra_buffers() -> None:
    import llama_cpp.llama_cpp as bindings  # what llama_cpp.Llama calls, at call time

    original = bindings.llama_model_default_params

    def params() -> Any:
        p = original()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    bindings.llama_model_default_params = params


def main() -> None:
    _no_extra_buffers()
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
