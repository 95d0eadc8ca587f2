#!/usr/bin/python3
"""A small *trained* GPT-2 for the examples' pictures and a test: writes
tests/data/models/gpt2-trained/ in the hub's GPT-2 layout (the layout that
tests/reference/make_models.py's make_gpt2 writes, through its helpers).

    /usr/bin/python3 tests/reference/train_tiny_gpt2.py [--steps N] [--out DIR]

For speed, run it with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-serial
(package libopenblas0-serial): Debian's python3-torch calls the reference
BLAS otherwise, about 14x slower (and rounding differs).

Text: the King James Version of the Bible (1611), as Debian's package
`bible-kjv-text` ships it (/usr/lib/bible.data, compressed), read with the
`bible` program of the package `bible-kjv` (`bible -l0 Gen1:1-Rev22:21`,
one verse per line). The package's copyright file: "The copyright for the
King James Version text of the Bible is expired since the translation was
done in 1611"; the text is in the public domain (outside the United Kingdom,
where the Crown's letters patent apply to printing it). Verse numbers and
chapter headings are dropped: one verse per line.

Split: Genesis .. Jude is the training text; the Revelation of St. John the
Divine (the last book, 404 verses) is held out for the validation loss, the
reference logits and the test's held-out passage.

Tokenizer: GPT-2's byte-level BPE (GPT-2 pre-split), N_MERGES merges learned on
the training text with hf_reference.train_merges, then <|endoftext|>:
vocabulary 256 + N_MERGES + 1 = 1024.

Model: GPT-2 (pre-norm LayerNorm, gelu_new, learned positions, tied lm_head),
d 128, 4 layers, 4 heads of 32, n_positions 512, no dropout. AdamW (lr 3e-3,
warm-up 100 steps, cosine to 3e-4, weight decay 0.1 on matrices), batch 4
windows of 512 tokens, STEPS steps, float32, one thread, fixed seeds,
torch.use_deterministic_algorithms(True). The forward below is GPT-2's (the
same equations as hf_reference.gpt2_forward, batched, float32); the
reference outputs are computed afterwards by hf_reference.gpt2_forward in
float64 from the stored (F16-rounded) weights.

Written: config.json, generation_config.json, model.safetensors (F16, no
attn.bias mask buffers, as transformers >= 4.31 saves GPT-2), vocab.json,
merges.txt, tokenizer.json, tokenizer_config.json, and reference/:
input_ids.npy / logits.npy (float64, the first 64 tokens of Revelation 1),
heldout.txt (Revelation 21:1-4, for the test's loss bound), revelation.txt
(the whole held-out book, examples/randomized_attention.cpp's input),
greedy_prompt_ids.npy / greedy_ids.npy (a greedy continuation),
tokens.json (as the other models), train_log.json (the losses).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as R  # noqa: E402
import make_models as M  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

NAME = "gpt2-trained"
N_MERGES = 767
D, L, H, P = 128, 4, 4, 512
BATCH = 4
SEED = 2028
HELD_OUT_BOOK = "Revelation"
N_REF = 64  # reference tokens
GREEDY_PROMPT = "And God said unto Moses,"
N_GREEDY = 24


def kjv_verses():
    """(book, text) of every verse, in order, from the bible-kjv packages."""
    out = subprocess.run(["/usr/bin/bible", "-l0", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, check=True).stdout.decode("ascii")
    verses, book = [], None
    for line in out.split("\n"):
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            verses.append((book, m.group(1).strip()))
        elif line.strip():
            book = line.strip().rsplit(" ", 1)[0]  # "Genesis 1" -> "Genesis"
    assert len(verses) == 31102, len(verses)  # the KJV's verse count
    return verses


def corpus():
    verses = kjv_verses()
    train = "\n".join(t for b, t in verses if b != HELD_OUT_BOOK) + "\n"
    val = "\n".join(t for b, t in verses if b == HELD_OUT_BOOK) + "\n"
    return train, val


# ----------------------------------------------------------------------------
# GPT-2 in float32 (batched), parameters under the hub's names
# ----------------------------------------------------------------------------

def init_params(V, g):
    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).requires_grad_()

    def const(n, v):
        return torch.full((n,), float(v)).requires_grad_()

    W = {"wte.weight": normal(V, D), "wpe.weight": normal(P, D, std=0.01)}
    proj_std = 0.02 / math.sqrt(2 * L)  # GPT-2's scaled init of the residual projections
    for l in range(L):
        p = f"h.{l}."
        W[p + "ln_1.weight"] = const(D, 1); W[p + "ln_1.bias"] = const(D, 0)
        W[p + "attn.c_attn.weight"] = normal(D, 3 * D); W[p + "attn.c_attn.bias"] = const(3 * D, 0)
        W[p + "attn.c_proj.weight"] = normal(D, D, std=proj_std); W[p + "attn.c_proj.bias"] = const(D, 0)
        W[p + "ln_2.weight"] = const(D, 1); W[p + "ln_2.bias"] = const(D, 0)
        W[p + "mlp.c_fc.weight"] = normal(D, 4 * D); W[p + "mlp.c_fc.bias"] = const(4 * D, 0)
        W[p + "mlp.c_proj.weight"] = normal(4 * D, D, std=proj_std); W[p + "mlp.c_proj.bias"] = const(D, 0)
    W["ln_f.weight"] = const(D, 1); W["ln_f.bias"] = const(D, 0)
    return W


def forward32(W, ids):
    """ids (B, N) -> logits (B, N, V): GPT-2 as hf_reference.gpt2_forward."""
    B, N = ids.shape
    hd = D // H
    eps = 1e-5
    h = W["wte.weight"][ids] + W["wpe.weight"][:N]
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    for l in range(L):
        p = f"h.{l}."
        a = F.layer_norm(h, (D,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (t.view(B, N, H, hd).transpose(1, 2) for t in qkv.split(D, dim=-1))
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        s = s.masked_fill(~causal, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v
        o = o.transpose(1, 2).reshape(B, N, D)
        h = h + (o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"])
        m = F.layer_norm(h, (D,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = F.gelu(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + (m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"])
    h = F.layer_norm(h, (D,), W["ln_f.weight"], W["ln_f.bias"], eps)
    return h @ W["wte.weight"].T


def mean_loss(W, data, n_windows=None):
    """Mean next-token cross-entropy (nats) over consecutive windows of P tokens."""
    starts = list(range(0, len(data) - P - 1, P))
    if n_windows:
        starts = starts[:n_windows]
    total, count = 0.0, 0
    with torch.no_grad():
        for s in starts:
            x = data[s:s + P].unsqueeze(0)
            y = data[s + 1:s + P + 1]
            total += float(F.cross_entropy(forward32(W, x)[0], y, reduction="sum"))
            count += P
    return total / count


def train(W, train_ids, val_ids, steps, log):
    g = torch.Generator().manual_seed(SEED + 1)
    decay = [v for k, v in W.items() if v.dim() == 2]
    no_decay = [v for k, v in W.items() if v.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    lr_max, lr_min, warm = 3e-3, 3e-4, 100
    t0 = time.process_time()
    ema = None
    for step in range(1, steps + 1):
        lr = lr_max * step / warm if step <= warm else \
            lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * (step - warm) / (steps - warm)))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train_ids) - P - 1, (BATCH,), generator=g)
        x = torch.stack([train_ids[s:s + P] for s in starts])
        y = torch.stack([train_ids[s + 1:s + P + 1] for s in starts])
        loss = F.cross_entropy(forward32(W, x).reshape(-1, forward32.V), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), 1.0)
        opt.step()
        ema = float(loss) if ema is None else 0.95 * ema + 0.05 * float(loss)
        if step % 100 == 0 or step == steps:
            val = mean_loss(W, val_ids, n_windows=8)
            cpu = time.process_time() - t0
            print(f"step {step:5d}  lr {lr:.2e}  train (EMA) {ema:.3f}  val {val:.3f}  cpu {cpu:.0f} s",
                  flush=True)
            log.append({"step": step, "train_loss_ema": ema, "val_loss_8_windows": val, "cpu_seconds": cpu})
    return time.process_time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--out", default=os.path.join(M.ROOT, NAME))
    ap.add_argument("--references-only", action="store_true",
                    help="rewrite reference/ from the stored model (no training)")
    args = ap.parse_args()
    if args.references_only:
        references_only(args.out)
        return
    torch.manual_seed(SEED)

    train_text, val_text = corpus()
    t0 = time.process_time()
    merges = R.train_merges(train_text, N_MERGES, R.split_gpt2)
    bpe = R.ByteBPE(merges, ["<|endoftext|>"], R.split_gpt2)
    V = len(bpe)
    assert V == 1024, V
    train_ids = torch.tensor(bpe.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(bpe.encode(val_text), dtype=torch.long)
    print(f"KJV: {len(train_text)} training characters -> {len(train_ids)} tokens, "
          f"{len(val_text)} held-out ({HELD_OUT_BOOK}) -> {len(val_ids)} tokens; vocabulary {V}; "
          f"BPE {time.process_time() - t0:.0f} s", flush=True)

    W = init_params(V, torch.Generator().manual_seed(SEED))
    forward32.V = V
    log = []
    cpu = train(W, train_ids, val_ids, args.steps, log)

    # Store F16 and measure the final losses with the stored (rounded) weights.
    Wnp = {k: v.detach().numpy().astype(np.float32) for k, v in W.items()}
    W16 = {k: torch.tensor(R.round_to(v, "F16"), dtype=torch.float32) for k, v in Wnp.items()}
    train_loss = mean_loss(W16, train_ids[: 64 * P + 1])  # the first 64 windows (Genesis .. Exodus)
    val_loss = mean_loss(W16, val_ids)
    print(f"training: {args.steps} steps, {cpu:.0f} CPU s; final loss (F16 weights): "
          f"train {train_loss:.4f} (first {64 * P} tokens), validation {val_loss:.4f} "
          f"(all of {HELD_OUT_BOOK}); log(V) = {math.log(V):.4f}", flush=True)

    # The directory, through make_models' GPT-2 helpers.
    cfg = M.gpt2_config(V, d=D, L=L, H=H, P=P)
    for k in ("attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"):
        cfg[k] = 0.0  # trained without dropout
    cfg["torch_dtype"] = "float16"
    os.makedirs(os.path.join(args.out, "reference"), exist_ok=True)
    R.write_json(os.path.join(args.out, "config.json"), cfg)
    R.write_json(os.path.join(args.out, "generation_config.json"), {
        "_from_model_config": True, "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
        "transformers_version": "4.26.0.dev0"})
    R.write_safetensors(os.path.join(args.out, "model.safetensors"), Wnp, {k: "F16" for k in Wnp},
                        metadata={"format": "pt"})
    M.write_gpt2_tokenizer(args.out, bpe, cfg)

    info = write_references(args.out, bpe, cfg, Wnp, val_text)
    R.write_json(os.path.join(args.out, "reference", "train_log.json"), {
        "steps": args.steps, "cpu_seconds": cpu, "final_train_loss": train_loss,
        "final_validation_loss": val_loss, **info, "log": log})


def write_references(out, bpe, cfg, Wnp, val_text):
    """reference/: float64 logits of hf_reference.gpt2_forward on the stored
    (F16) weights, the held-out passage and its loss, a greedy continuation."""
    Wref = M.to_torch(Wnp, {k: "F16" for k in Wnp})
    ref_ids = bpe.encode(val_text)[:N_REF]
    logits, _, _ = R.gpt2_forward(Wref, cfg, ref_ids)
    W16 = {k: v.float() for k, v in Wref.items()}
    ref32 = forward32(W16, torch.tensor([ref_ids]))[0].double()
    err = float((ref32 - logits).abs().max() / logits.abs().max())
    assert err < 1e-4, f"float32 training forward vs float64 reference: {err}"
    R.save_npy(os.path.join(out, "reference", "input_ids.npy"), ref_ids, np.int64)
    R.save_npy(os.path.join(out, "reference", "logits.npy"), logits.numpy(), np.float64)
    # The held-out passage of the test: Revelation 21:1-4 (in the validation text).
    start = val_text.index("And I saw a new heaven and a new earth")
    passage = "\n".join(val_text[start:].split("\n")[:4]) + "\n"
    pids = bpe.encode(passage)
    assert bpe.decode(pids) == passage
    pl = R.gpt2_forward(Wref, cfg, pids)[0]
    passage_loss = float(F.cross_entropy(pl[:-1], torch.tensor(pids[1:])))
    with open(os.path.join(out, "reference", "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(passage)
    # The whole held-out book: the input of examples/randomized_attention.cpp.
    with open(os.path.join(out, "reference", "revelation.txt"), "w", encoding="utf-8") as f:
        f.write(val_text)
    M.write_tokens(out, bpe, "<|endoftext|>")
    prompt = bpe.encode(GREEDY_PROMPT)
    greedy, margin, _ = R.greedy(R.gpt2_forward, Wref, cfg, prompt, N_GREEDY)
    R.save_npy(os.path.join(out, "reference", "greedy_prompt_ids.npy"), prompt, np.int64)
    R.save_npy(os.path.join(out, "reference", "greedy_ids.npy"), greedy, np.int64)
    print(f"greedy continuation of {GREEDY_PROMPT!r}: {bpe.decode(greedy)!r} (min top-2 margin {margin:.3f})")
    print(f"held-out passage (Revelation 21:1-4, {len(pids)} tokens): loss {passage_loss:.4f}; "
          f"reference logits scale {float(logits.abs().max()):.2f}; f32 vs f64 {err:.1e}")
    return {"heldout_passage_loss": passage_loss, "heldout_passage_tokens": len(pids),
            "greedy_prompt": GREEDY_PROMPT, "greedy_text": bpe.decode(greedy), "greedy_min_margin": margin}


def references_only(out):
    """Rewrites reference/ from the stored files (no training)."""
    _, val_text = corpus()
    with open(os.path.join(out, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.rstrip("\n").split(" ")) for line in f if not line.startswith("#version")]
    bpe = R.ByteBPE(merges, ["<|endoftext|>"], R.split_gpt2)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    Wnp = {k: np.asarray(v, np.float32) for k, v in R.read_safetensors(os.path.join(out, "model.safetensors")).items()}
    log_path = os.path.join(out, "reference", "train_log.json")
    with open(log_path) as f:
        log = json.load(f)
    log.update(write_references(out, bpe, cfg, Wnp, val_text))
    R.write_json(log_path, log)

if __name__ == "__main__":
    main()
