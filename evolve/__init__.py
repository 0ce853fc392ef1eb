"""evolve: discover step-time models for LLM-inference simulators by evolutionary search."""

import evaluator  # noqa: F401  (pins OpenBLAS's kernels before anything loads numpy)

__version__ = "0.1.0"
