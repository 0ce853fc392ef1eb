"""Where a generation's children are fitted and judged: in-process, forked workers, or Ray tasks.
"""
