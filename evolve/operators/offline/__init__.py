"""The offline operator: deterministic AST mutations and crossover, no endpoint needed.
"""
