"""The program language: parse, whitelist-check, canonicalise, compile (numpy/numba) and the
decoding grammars.

May import :mod:`evolve.text`, :mod:`evolve.errors` and :mod:`evaluator.api`.
"""
