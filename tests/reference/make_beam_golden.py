#!/usr/bin/python3
"""Golden beam-search results for kappa's beam_search_ids (tests/transformer/
beam_search_test.cpp), written from Hugging Face transformers' beam search
(generation/beam_search.py, BeamSearchScorer and BeamHypotheses, v4.36-4.45,
which counts lengths without the decoder prompt):

  * B beams start as B copies of the prompt, scores [0, -1e9, ..., -1e9];
  * each step: scores = log_softmax(last logits of each beam) + beam score,
    flattened over (beam, token); the top max(2, 1 + n_eos) * B candidates,
    best first; walking them in order, an EOS candidate among the first B
    ends a hypothesis (the beam's tokens without the EOS, scored
    sum_logprobs / (cur_len - prompt_len) ** length_penalty with cur_len =
    current length + 1); an EOS candidate ranked B or later is skipped; any
    other candidate becomes a next beam until there are B;
  * done when BeamHypotheses.is_done(max candidate score, cur_len): at least
    B hypotheses and: early_stopping True; False: worst kept >= best / (cur_len
    - prompt_len) ** lp; "never": the same with max_length - prompt_len when
    lp > 0;
  * at max_length (prompt + max_new_tokens) or when done, finalize: the B
    running beams are added as hypotheses (generated_len = their new tokens)
    unless done; the num_return_sequences best, best first; an EOS is
    appended to a hypothesis shorter than the longest + 1 (the EOS-ended ones).

The model forward is hf_reference's (float64, from the upstream model code),
run on the whole sequence at every step (no cache). Writes
tests/data/beam/golden.json. Run: /usr/bin/python3 tests/reference/make_beam_golden.py
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402
from make_inspection_golden import load  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "beam", "golden.json")
FORWARD = {"gpt2": R.gpt2_forward, "llama": R.llama_forward, "deepseek_v2": R.deepseek_forward}


class Hyps:
    def __init__(self, n, lp, early, max_length):
        self.n, self.lp, self.early, self.max_length = n, lp, early, max_length
        self.beams = []
        self.worst = 1e9

    def add(self, hyp, sum_logprobs, generated_len):
        score = sum_logprobs / (generated_len ** self.lp)
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, hyp))
            if len(self.beams) > self.n:
                s = sorted([(sc, i) for i, (sc, _) in enumerate(self.beams)])
                del self.beams[s[0][1]]
                self.worst = s[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best, cur_len, prompt_len):
        if len(self.beams) < self.n:
            return False
        if self.early is True:
            return True
        if self.early is False or self.lp <= 0:
            return self.worst >= best / (cur_len - prompt_len) ** self.lp
        return self.worst >= best / (self.max_length - prompt_len) ** self.lp


def beam_search(forward, W, cfg, prompt, B, max_new, lp, early, nrs, eos):
    prompt_len = len(prompt)
    max_length = prompt_len + max_new
    seqs = [list(prompt) for _ in range(B)]
    scores = torch.tensor([0.0] + [-1e9] * (B - 1), dtype=torch.float64)
    hyps = Hyps(B, lp, early, max_length)
    done = False
    n_keep = max(2, 1 + len(eos)) * B
    while True:
        rows = torch.stack([forward(W, cfg, s)[0][-1] for s in seqs])  # (B, V)
        logp = torch.log_softmax(rows, dim=-1) + scores[:, None]
        V = logp.shape[1]
        top_scores, top_idx = torch.topk(logp.reshape(-1), n_keep, largest=True, sorted=True)
        cur_len = len(seqs[0]) + 1
        nxt = []
        for rank, (sc, idx) in enumerate(zip(top_scores.tolist(), top_idx.tolist())):
            beam, tok = divmod(idx, V)
            if tok in eos:
                if rank >= B:
                    continue
                hyps.add(seqs[beam][prompt_len:] + [tok], sc, cur_len - prompt_len)
            else:
                nxt.append((seqs[beam] + [tok], sc))
            if len(nxt) == B:
                break
        done = done or hyps.is_done(float(top_scores.max()), cur_len, prompt_len)
        seqs = [s for s, _ in nxt]
        scores = torch.tensor([sc for _, sc in nxt], dtype=torch.float64)
        if done or len(seqs[0]) >= max_length:
            break
    if not done:
        for s, sc in zip(seqs, scores.tolist()):
            hyps.add(s[prompt_len:], sc, len(s) - prompt_len)
    best = sorted(hyps.beams, key=lambda x: x[0])  # pop() from the end: best first
    out = []
    for _ in range(nrs):
        sc, ids = best.pop()
        out.append({"ids": ids, "score": sc})
    return out


CASES = [
    # model, prompt (the first n reference ids, or ids), max_new, B, length_penalty, early_stopping, nrs, eos
    ("gpt2", 4, 6, 3, 1.0, False, 3, []),
    ("gpt2", 5, 5, 4, 0.0, True, 2, []),
    ("llama", 3, 8, 3, 1.0, False, 3, None),
    ("llama", 3, 8, 3, 2.0, "never", 2, None),
    ("llama", 3, 8, 2, -1.0, True, 2, None),
    ("deepseek_v2", 4, 5, 3, 1.0, False, 1, None),
    # prompts after which the tiny llama's EOS (297) is likely: hypotheses end
    ("llama", [10], 6, 3, 1.0, False, 3, None),
    ("llama", [10], 6, 3, 1.0, True, 3, None),
    ("llama", [10], 6, 4, 2.0, "never", 4, None),
    ("llama", [296, 10], 6, 3, 0.5, False, 2, None),
]


def main():
    results = []
    for name, n_prompt, max_new, B, lp, early, nrs, eos in CASES:
        d, cfg, W, ids = load(name)
        if eos is None:
            with open(os.path.join(d, "generation_config.json")) as f:
                e = json.load(f)["eos_token_id"]
            eos = e if isinstance(e, list) else [e]
        prompt = ids[:n_prompt] if isinstance(n_prompt, int) else n_prompt
        out = beam_search(FORWARD[name], W, cfg, prompt, B, max_new, lp, early, nrs, eos)
        results.append({"model": name, "prompt": prompt, "max_new_tokens": max_new, "num_beams": B,
                        "length_penalty": lp, "early_stopping": str(early), "num_return_sequences": nrs,
                        "eos": eos, "results": out})
        print(name, B, lp, early, [(r["ids"], round(r["score"], 4)) for r in out])
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
