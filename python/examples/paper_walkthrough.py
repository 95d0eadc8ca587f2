#!/usr/bin/env python3
"""The paper's walk-through of one attention layer, and its Figure 3.

"the cat sat on the mat": word tokens (Figure 2), embedding rows X_j = E_{i_j},
Q = X W^Q, K = X W^K, V = X W^V, then A, Z, Z^-1 A and Y for the linear kernel
(f(x) = x, s = 1: Figure 3), the scaled exponential (softmax) and softmax with a
causal mask. Small integer entries (seeded) keep every number easy to follow
by hand. Writes the three weight matrices Z^-1 A as heatmaps (Figure 3) to the
PNG given on the command line.

    python3 python/examples/paper_walkthrough.py figure3.png
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kappa  # noqa: E402


def show(title, m, rows, cols=None):
    print(title)
    if cols is not None:
        print(" " * 10 + "".join(f"{c[:8]:>9}" for c in cols))
    for label, row in zip(rows, np.atleast_2d(m)):
        print(f"{label[:9]:>10}" + "".join(f"{x:9.3f}" for x in row))
    print()


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    sentence = "the cat sat on the mat"
    tok = kappa.WordTokenizer(sentence)
    ids = tok.encode(sentence)
    tokens = [tok.token(i) for i in ids]
    print(f'sentence: "{sentence}"\ntokens:   ' + " ".join(f"{t}({i})" for t, i in zip(tokens, ids)))
    print(f"N_T = {tok.vocab_size} tokens in the vocabulary (with <unk>), N = {len(ids)}\n")

    rng = np.random.default_rng(7)
    d, d_qk, d_v = 4, 3, 2
    e = rng.integers(-2, 3, size=(tok.vocab_size, d)).astype(np.float64)  # E (N_T x d)
    x = e[ids]                                                           # X (N x d)
    show("X (N x d): row j is E_{i_j}; both 'the' rows are equal", x, tokens)
    w_q = 0.5 * rng.integers(-1, 2, size=(d, d_qk))
    w_k = 0.5 * rng.integers(-1, 2, size=(d, d_qk))
    w_v = rng.integers(-1, 2, size=(d, d_v)).astype(np.float64)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    show("Q = X W^Q (N x d_QK)", q, tokens)
    show("K = X W^K (N x d_QK)", k, tokens)
    show("V = X W^V (N x d_V)", v, tokens)

    cases = [
        ("linear kernel f(x) = x (Figure 3), s = 1", dict(kernel="linear")),
        ("scaled exponential (softmax), s = 1/sqrt(d_QK)", dict(kernel="softmax")),
        ("softmax with a causal mask (token j sees tokens 0..j)", dict(kernel="softmax", mask="causal")),
    ]
    results = []
    for title, kw in cases:
        det = kappa.attention_details(q, k, v, **kw)
        print("=" * 72 + "\n" + title + "\n")
        shift = np.exp(det.row_shift)  # softmax reports A and Z divided by exp(m_i)
        show("A = f(s Q K^T)", det.A * shift[:, None], tokens, tokens)
        show("Z = diag(A 1)", (det.Z * shift)[:, None], tokens)
        show("Z^-1 A (attention weights; each row sums to 1)", det.weights, tokens, tokens)
        show("Y = Z^-1 A V", det.Y, tokens)
        results.append((title, det, kw.get("mask") == "causal"))

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), constrained_layout=True)
    for ax, (title, det, causal) in zip(axes, results):
        w = det.weights
        if "linear" in title:  # signed weights: a diverging map centred on 0
            lim = np.abs(w).max()
            im = ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim)
        else:
            shown = np.ma.masked_where(np.triu(np.ones_like(w, bool), 1), w) if causal else w
            cmap = plt.get_cmap("viridis").copy()
            cmap.set_bad("0.8")  # masked cells grey
            im = ax.imshow(shown, cmap=cmap, vmin=0, vmax=1)
        ax.set_xticks(range(len(tokens)), tokens, rotation=45)
        ax.set_yticks(range(len(tokens)), tokens)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_title(title, fontsize=9)
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                if not (causal and j > i):
                    ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="k" if "linear" in title or w[i, j] > 0.5 else "w")
        fig.colorbar(im, ax=ax, shrink=0.8, label="Z^-1 A")
    fig.suptitle('Figure 3: attention weights Z^-1 A for "the cat sat on the mat"')
    fig.savefig(argv[1], dpi=120)
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
