"""The closed-loop vLLM V1 scheduler replica, compiled by numba: one engine step at a time.

Why a kernel of its own: this loop runs ~1 M steps for the 16 runs and must be compiled;
everything around it (inputs, the corpus, metrics) is plain numpy in :mod:`evaluator.sim.simulator`,
whose docstring lists what the replica does and every simplification relative to vLLM
v0.15.1.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types

from evaluator.features.components import features_into
from evaluator.features.glossary import (
    BLIS_PF_ATTN,
    DC_KV_SUM,
    DECODE_TOKENS,
    KV_MAX,
    N_DECODE,
    N_FEATURES,
    N_PREFILL,
    N_STATS,
    PF_ATTN_PAIRS,
    PF_KV_CTX,
    PREFILL_TOKENS,
)
from evaluator.model import MAX_STEP_US
from evaluator.model import STEP_SIG as _STEP_SIG
from evaluator.sim.prompt_blocks import _evict, _release

STEP_FN_TYPE = types.FunctionType(_STEP_SIG)

# Request states.
_PENDING, _WAITING, _RUNNING, _DONE, _ABORTED = 0, 1, 2, 3, 4
ERR_NONE, ERR_BAD_STEP, ERR_STUCK = 0, 1, 2

f8a = nb.float64[::1]
i8a = nb.int64[::1]
_RUN_SIG = nb.types.Tuple((
    nb.int64, nb.int64, nb.int64, nb.int64,  # n_steps, err, err_step, n_preempt
    nb.float64[:, ::1], f8a, f8a,  # stats, start, end
    i8a, i8a, i8a, nb.boolean[::1], i8a, i8a,  # admit, first, last, aborted, preempts, kv
    i8a, nb.int32[::1], nb.int32[::1], nb.int32[::1], nb.boolean[::1], nb.int32[::1],
))(STEP_FN_TYPE, f8a, f8a, f8a, f8a, i8a, i8a, i8a, i8a, i8a,
  nb.int64, nb.int64, nb.int64, nb.int64, nb.int64, nb.boolean, nb.boolean, nb.boolean,
  f8a, nb.float64, nb.float64)


@nb.njit(cache=True)
def _grow2(a, n):
    b = np.empty((a.shape[0], n), a.dtype)
    b[:, : a.shape[1]] = a
    return b


@nb.njit(cache=True)
def _grow1(a, n):
    b = np.empty(n, a.dtype)
    b[: a.shape[0]] = a
    return b


@nb.njit(cache=True)
def _count(st1, t, k, s):
    """Count a request scheduled ``t`` tokens, ``k`` of its ``s`` computed, into the step's
    statistics ``st1`` (glossary.STATS order) as it is scheduled: no second pass."""
    if k < s:  # prefill (a chunk of it)
        st1[N_PREFILL, 0] += 1.0
        st1[PREFILL_TOKENS, 0] += t
        st1[PF_ATTN_PAIRS, 0] += t * (k + (t + 1.0) / 2.0)
        st1[PF_KV_CTX, 0] += k + t
        st1[BLIS_PF_ATTN, 0] += t * (s + t / 2.0)
    else:
        st1[N_DECODE, 0] += 1.0
        st1[DECODE_TOKENS, 0] += t
        st1[DC_KV_SUM, 0] += k
    if k + t > st1[KV_MAX, 0]:
        st1[KV_MAX, 0] = k + t


@nb.njit(_RUN_SIG, cache=True, nogil=True)
def _run(fn, consts, arch, entry, deadline, input_len, output_len, group, prompt, order,
         shared_blocks, max_seqs, budget_max, block_size, kv_blocks, record, overlap, blis,
         noise, host_per_open, host_floor):
    """``overlap``: vLLM's async scheduling. ``blis``: BLIS's loop at the pinned commit
    (docs/blis.md): a preempted request re-prefills its input and decodes every output
    token again (its TTFT re-timed), a newly admitted request's step sees no cached prefix
    (``ProgressIndex`` advances after ``StepTime``), steps last whole µs (at least 1).
    ``noise``: step ``j``'s time is multiplied by ``noise[j % len(noise)]`` (empty: none).
    ``host_per_open``: µs added to every step per open request (entered, neither finished
    nor aborted). ``host_floor``: every step lasts at least this many µs (0: no floor), the
    engine stepping at its host loop's pace when that is the slower."""
    overlap = overlap and not blis
    n = entry.shape[0]
    state = np.zeros(n, np.int64)
    computed = np.zeros(n, np.int64)
    n_out = np.zeros(n, np.int64)
    seq_len = input_len.copy()  # tokens to (re)compute as prompt: input (+ output on resume)
    blocks = np.zeros(n, np.int64)
    shared_used = np.zeros(n, np.int64)
    sched_new = np.zeros(n, np.int64)
    admit = np.full(n, -1, np.int64)
    first = np.full(n, -1, np.int64)
    last = np.full(n, -1, np.int64)
    aborted = np.zeros(n, np.bool_)
    pre_cnt = np.zeros(n, np.int64)
    n_groups = 1 if n == 0 else max(1, group.max() + 1)
    group_cached = np.zeros(n_groups, np.bool_)
    # Prompt caches (``prompt[i] >= 0``: requests that send the same prompt): blocks of the
    # prompt past its group's shared blocks, its length, holders, step of last release.
    n_prompts = 1 if n == 0 else max(1, prompt.max() + 1)
    pc = np.zeros(n_prompts, np.int64)
    plen = np.zeros(n_prompts, np.int64)
    pref = np.zeros(n_prompts, np.int64)
    plru = np.zeros(n_prompts, np.int64)
    holds = np.zeros(n, np.bool_)
    evictable = 0  # blocks of prompt caches nobody holds (free to vLLM, evicted on demand)

    waitq = np.empty(n + 1, np.int64)  # ring buffer; push back / push front / pop front
    w_head = 0
    w_len = 0
    running = np.empty(max_seqs, np.int64)
    n_run = 0
    sched = np.empty(max_seqs, np.int64)
    fresh = np.zeros(n, np.bool_)  # admitted this step (BLIS prices it with no cached prefix)

    cap = 1024
    for i in range(n):
        cap += output_len[i] // 4
    stats = np.zeros((N_STATS, cap), np.float64)
    begin = np.zeros(cap, np.float64)
    kv_used = np.zeros(cap, np.int64)
    end = np.zeros(cap, np.float64)
    mcap = 1024 if not record else cap * 8
    m_ptr = np.zeros(cap + 1, np.int64)
    m_req = np.zeros(mcap, np.int32)
    m_new = np.zeros(mcap, np.int32)
    m_kv = np.zeros(mcap, np.int32)
    m_pf = np.zeros(mcap, np.bool_)
    m_len = np.zeros(mcap, np.int32)
    n_mem = 0

    st1 = np.zeros((N_STATS, 1), np.float64)
    ft1 = np.zeros((N_FEATURES, 1), np.float64)
    fvec = np.zeros(N_FEATURES, np.float64)
    free = kv_blocks
    now = 0.0
    step = 0
    nxt = 0  # next request (in entry order) to enter the waiting queue
    dl = 0  # next request (in arrival order) whose deadline to check
    n_preempt = 0
    n_live = n
    n_open = 0  # entered the waiting queue, neither finished nor aborted
    n_noise = noise.shape[0]
    while n_live > 0:
        while nxt < n and entry[order[nxt]] <= now:
            r = order[nxt]
            if state[r] == _PENDING:
                state[r] = _WAITING
                waitq[(w_head + w_len) % (n + 1)] = r
                w_len += 1
                n_open += 1
            nxt += 1
        while dl < n and deadline[dl] <= now:
            r = dl
            if state[r] == _WAITING or state[r] == _RUNNING or state[r] == _PENDING:
                if state[r] != _PENDING:
                    n_open -= 1
                if state[r] == _RUNNING:
                    k = 0
                    for j in range(n_run):
                        if running[j] != r:
                            running[k] = running[j]
                            k += 1
                    n_run = k
                    evictable = _release(r, prompt, holds, pref, pc, plru, step, evictable)
                free += blocks[r]
                blocks[r] = 0
                state[r] = _ABORTED
                aborted[r] = True
                n_live -= 1
            dl += 1
        while w_len > 0 and state[waitq[w_head]] != _WAITING:  # lazily drop aborted
            w_head = (w_head + 1) % (n + 1)
            w_len -= 1
        if n_run == 0 and w_len == 0:
            if nxt >= n:
                break
            now = max(now, entry[order[nxt]])
            continue

        budget = budget_max
        n_s = 0
        for q in range(N_STATS):
            st1[q, 0] = 0.0
        preempted = False
        i = 0
        while i < n_run:
            r = running[i]
            new = input_len[r] + n_out[r] - computed[r]  # 1 for a decode
            if new > budget:
                new = budget
            if new <= 0:
                i += 1
                continue
            held = shared_used[r] + blocks[r]
            if computed[r] + new <= held * block_size:
                need = 0  # fits the blocks it holds (the common decode step)
            else:
                need = (computed[r] + new + block_size - 1) // block_size - held
            self_preempted = False
            while need > free:
                free, evictable = _evict(need, free, evictable, pc, pref, plru)
                if need <= free:
                    break
                v = running[n_run - 1]
                n_run -= 1
                free += blocks[v]
                blocks[v] = 0
                computed[v] = 0
                shared_used[v] = 0
                evictable = _release(v, prompt, holds, pref, pc, plru, step, evictable)
                if blis:  # BLIS: ProgressIndex = 0, outputs decoded again, TTFT re-timed
                    n_out[v] = 0
                    first[v] = -1
                seq_len[v] = input_len[v] + n_out[v]
                state[v] = _WAITING
                w_head = (w_head - 1) % (n + 1)
                waitq[w_head] = v
                w_len += 1
                preempted = True
                n_preempt += 1
                pre_cnt[v] += 1
                if v == r:
                    self_preempted = True
                    break
            if self_preempted:
                break
            if need > 0:
                free -= need
                blocks[r] += need
            sched_new[r] = new
            sched[n_s] = r
            n_s += 1
            budget -= new
            _count(st1, float(new), float(computed[r]), float(seq_len[r]))
            i += 1

        # Async scheduling (``overlap``): a busy engine formed this step as the previous
        # one began, so only requests that had arrived by then can join it.
        cutoff = now
        if overlap and n_s > 0 and step > 0 and now <= end[step - 1]:
            cutoff = begin[step - 1]
        if not preempted:
            while w_len > 0 and budget > 0 and n_run < max_seqs:
                r = waitq[w_head]
                if state[r] != _WAITING:
                    w_head = (w_head + 1) % (n + 1)
                    w_len -= 1
                    continue
                if entry[r] > cutoff:
                    break
                hit = 0
                p = prompt[r]
                use_p = False
                if group_cached[group[r]] or shared_blocks == 0:
                    hit = shared_blocks
                    if p >= 0 and pc[p] > 0 and plen[p] == input_len[r]:
                        hit += pc[p]
                        use_p = True
                    hit *= block_size
                    lim = ((seq_len[r] - 1) // block_size) * block_size
                    if hit > lim:
                        hit = lim
                new = seq_len[r] - hit
                if new > budget:
                    new = budget
                need = (hit + new + block_size - 1) // block_size - hit // block_size
                if use_p:  # held now: not evictable to make room for itself
                    if pref[p] == 0:
                        evictable -= pc[p]
                    pref[p] += 1
                if need > free:
                    free, evictable = _evict(need, free, evictable, pc, pref, plru)
                if need > free:
                    if use_p:
                        pref[p] -= 1
                        if pref[p] == 0:
                            evictable += pc[p]
                    break
                holds[r] = use_p
                w_head = (w_head + 1) % (n + 1)
                w_len -= 1
                free -= need
                blocks[r] = need
                shared_used[r] = hit // block_size
                computed[r] = hit
                state[r] = _RUNNING
                running[n_run] = r
                n_run += 1
                if admit[r] < 0:
                    admit[r] = step
                sched_new[r] = new
                sched[n_s] = r
                n_s += 1
                budget -= new
                seen = 0.0 if blis else float(computed[r])
                fresh[r] = blis
                _count(st1, float(new), seen, float(seq_len[r]))

        if n_s == 0:
            # Nothing fits (a lone request larger than the pool): wait for a change.
            if nxt < n:
                now = max(now, entry[order[nxt]])
                continue
            if dl < n:
                now = max(now, deadline[dl])
                continue
            return (step, ERR_STUCK, step, n_preempt, stats, begin, end, admit, first, last,
                    aborted, pre_cnt, kv_used, m_ptr, m_req, m_new, m_kv, m_pf, m_len)

        if step >= cap:
            cap = cap * 2
            stats = _grow2(stats, cap)
            begin = _grow1(begin, cap)
            kv_used = _grow1(kv_used, cap)
            end = _grow1(end, cap)
            m_ptr = _grow1(m_ptr, cap + 1)
        if record and n_mem + n_s > m_req.shape[0]:
            mc = max(m_req.shape[0] * 2, n_mem + n_s)
            m_req = _grow1(m_req, mc)
            m_new = _grow1(m_new, mc)
            m_kv = _grow1(m_kv, mc)
            m_pf = _grow1(m_pf, mc)
            m_len = _grow1(m_len, mc)

        if record:  # the batch's members (its statistics were counted as scheduled)
            for j in range(n_s):
                r = sched[j]
                m_req[n_mem] = r
                m_new[n_mem] = sched_new[r]
                m_kv[n_mem] = 0 if fresh[r] else computed[r]
                m_pf[n_mem] = computed[r] < seq_len[r]
                m_len[n_mem] = seq_len[r]
                n_mem += 1
        features_into(ft1, st1, arch)
        for q in range(N_FEATURES):
            fvec[q] = ft1[q, 0]
        d = fn(fvec, consts)
        if not (d > 0.0 and d < MAX_STEP_US):
            return (step, ERR_BAD_STEP, step, n_preempt, stats, begin, end, admit, first, last,
                    aborted, pre_cnt, kv_used, m_ptr, m_req, m_new, m_kv, m_pf, m_len)
        if n_noise > 0:
            d = d * noise[step % n_noise]
        if d < host_floor:
            d = host_floor
        if host_per_open > 0.0:
            d = d + host_per_open * n_open
        if blis:  # BLIS's clock: whole µs, at least 1 (clampToInt64, max(1, ...))
            d = max(np.floor(d), 1.0)
        for q in range(N_STATS):
            stats[q, step] = st1[q, 0]
        begin[step] = now
        kv_used[step] = kv_blocks - free - evictable
        now = now + d
        end[step] = now
        m_ptr[step + 1] = n_mem

        # Post-step: advance computed tokens, sample, finish.
        k = 0
        for j in range(n_run):
            r = running[j]
            fresh[r] = False
            if sched_new[r] > 0:
                computed[r] += sched_new[r]
                sched_new[r] = 0
                if (shared_used[r] == 0 and shared_blocks > 0 and not group_cached[group[r]]
                        and computed[r] >= shared_blocks * block_size):
                    group_cached[group[r]] = True
                    blocks[r] -= shared_blocks  # now owned by the cache, resident
                    shared_used[r] = shared_blocks
                p = prompt[r]
                full = 0  # the prompt's full blocks, if now computed (checked last: a division)
                if (p >= 0 and not holds[r] and pc[p] == 0 and pref[p] == 0
                        and shared_used[r] == shared_blocks):
                    full = input_len[r] // block_size
                if full > shared_blocks and computed[r] >= full * block_size:
                    pc[p] = full - shared_blocks  # now owned by the prompt's cache
                    plen[p] = input_len[r]
                    pref[p] = 1
                    holds[r] = True
                    blocks[r] -= pc[p]
                    shared_used[r] = full
                if computed[r] >= input_len[r] + n_out[r]:  # reached the frontier: sample
                    n_out[r] += 1
                    if first[r] < 0:
                        first[r] = step
                    if n_out[r] >= output_len[r]:
                        last[r] = step
                        state[r] = _DONE
                        n_open -= 1
                        free += blocks[r]
                        blocks[r] = 0
                        evictable = _release(r, prompt, holds, pref, pc, plru, step, evictable)
                        n_live -= 1
                        continue
            running[k] = r
            k += 1
        n_run = k
        step += 1
    return (step, ERR_NONE, -1, n_preempt, stats, begin, end, admit, first, last, aborted,
            pre_cnt, kv_used, m_ptr, m_req, m_new, m_kv, m_pf, m_len)
