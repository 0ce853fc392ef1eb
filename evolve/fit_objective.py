"""The fitting loss of one constant group, for a whole CMA-ES population at once.

Why not call ``evaluator.score`` per candidate: it rebuilds per-run metrics (percentiles,
dicts) and calls the program once per run; CMA-ES needs hundreds of evaluations. Here the
fitting windows of the group's runs are concatenated once, the program is evaluated once
per *population* (constants as ``C[n_const, P, 1]`` broadcast against ``F[N_FEATURES, n]``,
a form :mod:`evolve.codegen` supports), and only the two means the loss needs are computed.

The arithmetic mirrors ``evaluator/score.py`` (``score_fit_set``, ``end_times``, ``loss``)
operation for operation, so the value equals ``loss(evaluator.score(model, consts, names),
names)``; ``tests/test_fitting.py`` checks that to 1e-12. If the evaluator's scoring changes,
that test fails and this module must follow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluator.api import Evaluator, Scenario, StepModel
from evolve.language import Program

PENALTY = 1e6  # loss of invalid constants: large but finite (cma handles inf poorly)


class _Run:
    """Precomputed per-run arrays, indices already offset into the concatenated windows."""

    def __init__(self, sc: Scenario, fit, offset: int):
        keep = fit.meas_ok
        self.first = fit.first_idx[keep] + offset
        self.last = fit.last_idx[keep] + offset
        self.arr = fit.arrival_us[keep]
        self.out = fit.output_tokens[keep]
        idx = fit.req_index[keep]
        self.valid = bool(keep.any())
        m = sc.measured
        self.meas_e2e = float(m.e2e_s[idx].mean()) if self.valid else np.nan
        self.meas_ttft = float(m.ttft_s[idx].mean()) if self.valid else np.nan


class GroupObjective:
    """``obj(X[P, n_const]) -> loss[P]`` on the fitting windows of ``scenarios``."""

    def __init__(self, program: Program, model: StepModel, evaluator: Evaluator,
                 scenarios: Sequence[Scenario]):
        self.model = model
        self.post = program.post_decode_index
        self.otok = program.output_token_index
        fits = [evaluator.fit_sets[sc.name] for sc in scenarios]
        self.F = np.ascontiguousarray(np.concatenate([f.features for f in fits], axis=1))
        self.gate = np.concatenate([f.gate_us for f in fits])
        self.runs: list[_Run] = []
        self.segs: list[tuple[int, int, float]] = []
        q_req_in, q_req_out, q_arr, q_idx, uniq = [], [], [], [], []
        offset = 0
        for sc, fit in zip(scenarios, fits, strict=True):
            n = fit.features.shape[1]
            self.runs.append(_Run(sc, fit, offset))
            bounds = [*fit.seg_start.tolist(), n]
            for w in range(len(bounds) - 1):
                self.segs.append((offset + bounds[w], offset + bounds[w + 1],
                                  float(fit.anchor_us[w])))
            q_req_in.append(sc.input_tokens[fit.gate_req])
            q_req_out.append(sc.output_tokens[fit.gate_req])
            q_arr.append(sc.arrival_us[fit.gate_req])
            q_idx.append(fit.gate_idx + offset)
            uniq.append(np.vstack([sc.input_tokens, sc.output_tokens]).T)
            offset += n
        self.n = offset
        self.always_invalid = not all(r.valid for r in self.runs) or any(
            not (r.meas_e2e > 0 and r.meas_ttft > 0) for r in self.runs if r.valid)
        self.has_queue = model.queue_fn is not None
        if self.has_queue:
            idx = np.concatenate(q_idx)
            order = np.argsort(idx, kind="stable")
            self.q_R = np.vstack([np.concatenate(q_req_in)[order],
                                  np.concatenate(q_req_out)[order]]).astype(np.float64)
            self.q_arr = np.concatenate(q_arr)[order]
            steps, self.q_starts = np.unique(idx[order], return_index=True)
            self.q_steps = steps
            # every distinct (input, output) pair of the runs: the evaluator rejects a
            # queueing delay that is bad for *any* request, not only those in a window
            self.q_all = np.unique(np.concatenate(uniq), axis=0).T.astype(np.float64).copy()

    def _times(self, C: np.ndarray, P: int) -> np.ndarray:
        T = self.model.vector_fn(self.F, C)
        if T.shape == (P, self.n):
            return T
        # a vector_fn without population support: one candidate at a time
        return np.stack([np.broadcast_to(self.model.vector_fn(self.F, C[:, p, 0]), (self.n,))
                         for p in range(P)])

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        P = X.shape[0]
        if self.always_invalid:
            return np.full(P, PENALTY)
        C = np.ascontiguousarray(X.T)[:, :, None]
        with np.errstate(all="ignore"):
            T = self._times(C, P)
            ok = (T.min(axis=1) > 0.0) & (T.max(axis=1) < np.inf)
            gate = self._gates(C, P, ok)
            E = np.empty_like(T)
            for a, b, anchor in self.segs:
                s = np.cumsum(T[:, a:b], axis=1)
                prev = np.empty_like(s)
                prev[:, 0] = 0.0
                prev[:, 1:] = s[:, :-1]
                slack = np.maximum.accumulate(gate[:, a:b] - prev, axis=1)
                E[:, a:b] = s + np.maximum(slack, anchor)
            extra: np.ndarray | float = 0.0
            acc = np.zeros(P)
            for r in self.runs:
                if self.post is not None or self.otok is not None:
                    extra = 0.0
                    if self.post is not None:
                        extra = extra + X[:, self.post, None]
                    if self.otok is not None:
                        extra = extra + X[:, self.otok, None] * r.out
                ttft = ((E[:, r.first] - r.arr) * 1e-6).mean(axis=1)
                e2e = ((E[:, r.last] - r.arr + extra) * 1e-6).mean(axis=1)
                ape_e = np.abs(e2e - r.meas_e2e) / r.meas_e2e
                ape_t = np.abs(ttft - r.meas_ttft) / r.meas_ttft
                acc = acc + (ape_e ** 2 + ape_t ** 2) / 2.0
            out = np.sqrt(acc / len(self.runs))
        ok &= np.isfinite(out)
        return np.where(ok, out, PENALTY)

    def _gates(self, C: np.ndarray, P: int, ok: np.ndarray) -> np.ndarray:
        """Per-step gates; recomputed from the program's queueing delay when it has one."""
        if not self.has_queue:
            return np.broadcast_to(self.gate, (P, self.n))
        qfn = self.model.queue_fn
        assert qfn is not None
        d_all = np.broadcast_to(qfn(self.q_all, C), (P, self.q_all.shape[1]))
        ok &= np.all(np.isfinite(d_all) & (d_all >= 0.0), axis=1)
        gate = np.full((P, self.n), -np.inf)
        if self.q_arr.size:
            d = np.broadcast_to(qfn(self.q_R, C), (P, self.q_R.shape[1]))
            vals = self.q_arr + d
            gate[:, self.q_steps] = np.maximum.reduceat(vals, self.q_starts, axis=1)
        return gate
