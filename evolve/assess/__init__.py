"""Judging fitted programs beyond the fit: splits, held-out losses, physics probes and closed-loop
validation.

May import :mod:`evolve.program`, :mod:`evolve.config`, :mod:`evolve.text` and :mod:`evaluator.api`.
"""
