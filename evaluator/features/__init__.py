"""Per-step quantities: the glossary, analytical component times, measured kernel tables and
synthetic probe batches.

May import :mod:`evaluator.data` and :mod:`evaluator.model`.
"""
