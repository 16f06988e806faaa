"""Deterministic Nelder-Mead minimisation shared by the fits (ultracluster.calibrate, scripts/fit_collectives.py)."""
from __future__ import annotations

import numpy as np


def minimize(f, x0: np.ndarray, step, iters: int, tol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Plain Nelder-Mead (reflection 1, expansion 2, contraction 0.5, shrink 0.5) from `x0`, with an initial
    simplex of `step` (a number or one per coordinate) along each axis; stops after `iters` iterations or when
    the simplex's values differ by less than `tol`. Returns the best point and its value."""
    x0 = np.asarray(x0, dtype=float)
    steps = np.broadcast_to(np.asarray(step, dtype=float), x0.shape)
    pts = [x0] + [x0 + steps[i] * np.eye(x0.size)[i] for i in range(x0.size)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals, kind="stable")
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        c = np.mean(pts[:-1], axis=0)
        xr = 2 * c - pts[-1]
        fr = f(xr)
        if fr < vals[0]:
            xe = 3 * c - 2 * pts[-1]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], float(vals[i])
