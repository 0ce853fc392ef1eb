"""evaluator: measured vLLM runs, a closed-loop vLLM scheduler replica, and scoring.

Never imports ``evolve``; ``evolve`` reaches it only through ``evaluator.api``.
"""
