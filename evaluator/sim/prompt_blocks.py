"""The replica's bookkeeping of cached prompts' KV blocks, compiled by numba.

Why a module of its own: the scheduler kernel (:mod:`evaluator.sim.engine`) admits, preempts
and finishes requests; which cached prompt blocks it may evict, and when a prompt's blocks
become evictable, is one policy (least recently released first, whole prompts; the
simplification :mod:`evaluator.sim.simulator` states) that reads better apart from it.
"""

from __future__ import annotations

import numba as nb


@nb.njit(cache=True)
def _evict(need, free, evictable, pc, pref, plru):
    """Evict unreferenced prompt caches, least recently released first, until ``need``
    blocks are free or none is left; returns ``(free, evictable)``."""
    while need > free and evictable > 0:
        best = -1
        for p in range(pc.shape[0]):
            if pc[p] > 0 and pref[p] == 0 and (best < 0 or plru[p] < plru[best]):
                best = p
        if best < 0:
            break
        free += pc[best]
        evictable -= pc[best]
        pc[best] = 0
    return free, evictable


@nb.njit(cache=True)
def _release(r, prompt, holds, pref, pc, plru, step, evictable):
    """Request ``r`` stops holding its prompt's cache (finished, aborted, preempted); the
    cache becomes evictable when nobody holds it. Returns ``evictable``."""
    if holds[r]:
        holds[r] = False
        p = prompt[r]
        pref[p] -= 1
        if pref[p] == 0:
            evictable += pc[p]
            plru[p] = step
    return evictable
