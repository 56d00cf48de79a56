"""A numerical model of OpenVINO GenAI's sampled verification rule as read from the source.

The rule of ``Sampler::validate_candidate`` / ``sample_from_sequence_group``
(src/cpp/src/sampling/sampler.cpp:1386-1434 and 1497-1590 at openvino.genai commit
da1db864d2bc, see reports/openvino-genai-speculative-sampling.md, "Diagnosis"), in its steady
state (not the first cycle, not the KV bookkeeping defect), on the adapter's two tiny models:
per drafted position the target draws its own y ~ p, the draft token x is accepted iff
r <= q(x) / p(y) with r uniform on {0, 0.01, ..., 1}; on rejection the replacement is drawn
from the target's law at the NEXT position (conditioned on the rejected x). Prints the
acceptance as the pipeline counts it (accepted / drafted), the acceptance per checked position
and the mean randomised PIT of the emitted tokens along the target's order (0.5 if exact).

Usage, with the engine environment's interpreter (torch needed):
    PYTHONPATH=. $ENV reports/openvino-genai-rule-model.py DRAFT_NOISE GAMMA REQUESTS TOKENS
"""
import sys, numpy as np
from specdec.conformance.adapters import openvino as A
import torch
torch.set_num_threads(1)

noise = float(sys.argv[1]); gamma = int(sys.argv[2]); nreq = int(sys.argv[3]); ntok = int(sys.argv[4])
cfg = A.TinyConfig(draft_noise=noise)
tw, dw = A.make_weights(cfg)
rng = np.random.default_rng(5)

def laws(w, ctx, extra):
    # law after ctx, after ctx+extra[:1], ..., after ctx+extra (len(extra)+1 rows)
    return A.target_laws(w, cfg, ctx[:1], list(ctx[1:]) + list(extra) + [0])[len(ctx) - 1:]

def F(t):  # P(r <= t), r uniform on {0, 1/100, ..., 1}
    return np.minimum(1.0, (np.floor(100 * t) + 1) / 101)

alpha_exact = []
acc = drafted = cycles = 0
pits = []
for _ in range(nreq):
    ctx = list(rng.integers(0, 256, size=int(rng.integers(4, 13))))
    m = len(ctx)
    while len(ctx) - m < ntok:
        xs, qs = [], []
        cycles += 1
        for j in range(gamma):
            q = laws(dw, ctx + xs, [])[0]
            x = int(rng.choice(256, p=q)); xs.append(x); qs.append(q)
        P = laws(tw, ctx, xs)            # P[i]: target law predicting x_{i+1}; P[gamma]: bonus
        emitted = []
        for i in range(gamma):
            p, q, x = P[i], qs[i], xs[i]
            alpha_exact.append(float(np.sum(q * np.minimum(1, p / np.maximum(q, 1e-300)))))
            y = int(rng.choice(256, p=p))             # the target's own fresh sample
            r = rng.integers(0, 101) / 100             # uniform_int_distribution(0, 100) / 100
            drafted += 1
            if r <= q[x] / p[y]:                       # "p_i / q_i": draft prob of x over target prob of y
                acc += 1; emitted.append((x, P[i]))
            else:
                z = int(rng.choice(256, p=P[i + 1]))   # resample from the NEXT position's logits
                emitted.append((z, P[i])); break
        else:
            emitted.append((int(rng.choice(256, p=P[gamma])), P[gamma]))
        for z, p in emitted:
            # randomised PIT along the target's order (descending probability)
            order = np.argsort(-p, kind="stable"); rank = np.where(order == z)[0][0]
            below = p[order[:rank]].sum(); pits.append(below + rng.random() * p[z])
            ctx.append(z)
print(f"noise={noise} gamma={gamma}: accepted/drafted={acc/(gamma*cycles):.3f} per-checked-position acceptance={acc/drafted:.3f} "
      f"per-position exact-rule alpha={np.mean(alpha_exact):.3f} mean PIT (target order)={np.mean(pits):.3f} n={len(pits)}")
