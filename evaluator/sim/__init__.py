"""The closed-loop replica of vLLM's scheduler (the numba engine) and the batches it forms.

May import :mod:`evaluator.features`, :mod:`evaluator.data` and :mod:`evaluator.model`.
"""
