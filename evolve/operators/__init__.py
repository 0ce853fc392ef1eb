"""Operators: what proposes new programs from parents (the seam in ``base``).

``offline``: deterministic AST mutations and crossover; ``llm``: an OpenAI-compatible endpoint,
which falls back on and repairs with the offline operator. May import ``evolve.program``,
``evolve.config``, ``evolve.text``, ``evolve.errors`` and ``evaluator.api``.
"""
