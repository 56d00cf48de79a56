"""Hypothesis strategies shared by the test modules (import as ``from strategies import ...``).

Laws with zeros and one-hot cases, pairs ``(p, q)`` on one vocabulary (sometimes equal,
sometimes one-hot), logit vectors, and batches of verification rows for the kernel
(:func:`specdec.verify.verify`).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays


@st.composite
def laws(draw, size=None, min_size=1, max_size=8):
    """Probability vectors, including zeros and one-hot vectors."""
    v = draw(st.integers(min_size, max_size)) if size is None else size
    w = draw(arrays(np.float64, v, elements=st.one_of(st.just(0.0), st.floats(1e-3, 1.0))))
    if w.sum() == 0:
        w[draw(st.integers(0, v - 1))] = 1.0
    return w / w.sum()


def _one_hot(draw, v: int) -> np.ndarray:
    out = np.zeros(v)
    out[draw(st.integers(0, v - 1))] = 1.0
    return out


@st.composite
def pairs(draw, min_size=1, max_size=7):
    """``(p, q)`` on one vocabulary; sometimes equal, sometimes one of them one-hot."""
    p = draw(laws(min_size=min_size, max_size=max_size))
    kind = draw(st.sampled_from(["free", "equal", "one_hot_q", "one_hot_p"]))
    if kind == "equal":
        return p, p.copy()
    if kind == "one_hot_q":
        return p, _one_hot(draw, p.size)
    if kind == "one_hot_p":
        return _one_hot(draw, p.size), draw(laws(size=p.size))
    return p, draw(laws(size=p.size))


logit_vectors = arrays(np.float64, st.integers(1, 8), elements=st.floats(-20, 20))


@st.composite
def verify_rows(draw, max_rows=5, max_gamma=4, max_size=5):
    """Arguments of the kernel: laws ``p`` (rows, gamma + 1, V), ``q`` (rows, gamma, V),
    proposals drawn where ``q > 0``, ragged ``n_proposed`` (zero allowed) and uniforms."""
    rows = draw(st.integers(1, max_rows))
    gamma = draw(st.integers(0, max_gamma))
    v = draw(st.integers(1, max_size))
    p = np.array([[draw(laws(size=v)) for _ in range(gamma + 1)] for _ in range(rows)]).reshape(rows, gamma + 1, v)
    q = np.array([[draw(laws(size=v)) for _ in range(gamma)] for _ in range(rows)]).reshape(rows, gamma, v)
    props = np.array([[draw(st.sampled_from(np.flatnonzero(q[r, j]).tolist())) for j in range(gamma)]
                      for r in range(rows)], dtype=np.int64).reshape(rows, gamma)
    n_proposed = np.array([draw(st.integers(0, gamma)) for _ in range(rows)], dtype=np.int64)
    unit = st.floats(0.0, 1.0, exclude_max=True)
    u_accept = np.array([[draw(unit) for _ in range(gamma)] for _ in range(rows)]).reshape(rows, gamma)
    u_final = np.array([draw(unit) for _ in range(rows)])
    return p, q, props, n_proposed, u_accept, u_final
