"""The seed tutorial's published table: tokens and work counts, recompute vs cache."""
from __future__ import annotations

import torch

from .counting import Counter
from .model import causal_mask
from .jobs import Job, generation_passes, greedy

PROMPT = [0, 1, 2, 3]
PUBLISHED = {"tokens": [3, 2, 0, 4], "rows_recompute": 44, "rows_cache": 14,
             "pairs_recompute": 296, "pairs_cache": 112}


def job(prompt=PROMPT, new: int = 4) -> Job:
    """The sizes ``work_counts`` runs at (a cached generation and every recomputation)."""
    n = len(prompt)
    return Job("tutorial", f"S={n} N={new}", None, None, None,
               passes=generation_passes(1, n, new, recompute=True), positions=n + new - 1, cache=n + new)


def work_counts(model, prompt=PROMPT, new: int = 4) -> dict:
    """Generated tokens, and projected rows / score pairs read from the counted FLOPs:
    rows = q_proj FLOPs / (2 d d_q) over all layers; pairs = causal attention / (4 d_h)."""
    c, layer = model.c, model.c.layers[0]           # the toy's layers are all alike
    per_row = 2 * c.d * layer.h_q * layer.d_h * c.L  # q_proj FLOPs of one token through all layers
    per_pair = 4 * layer.d_h

    def measure(fn):
        with Counter(model) as counter:
            out = fn()
        counts = counter.mode.get_flop_counts()
        q = sum(sum(v.values()) for k, v in counts.items() if k.endswith(".attn.q_proj"))
        return out, q * c.L // per_row, counter.recorder.flops["causal"] // per_pair

    with torch.no_grad():
        (tokens, _), rows_c, pairs_c = measure(lambda: greedy(model, torch.tensor([prompt]), new))
        generated = tokens[0, len(prompt):].tolist()

        def recompute():
            seq = list(prompt)
            for _ in range(new):
                logits = model(torch.tensor([seq]), causal_mask(len(seq)))
                seq.append(int(logits.argmax()))
            return seq[len(prompt):]

        recomputed, rows_r, pairs_r = measure(recompute)
    return {"tokens": generated, "tokens_recompute": recomputed, "rows_recompute": rows_r,
            "rows_cache": rows_c, "pairs_recompute": pairs_r, "pairs_cache": pairs_c}


def tutorial_table(model) -> list[str]:
    got = work_counts(model)
    lines = ["seed tutorial table (toy decoder, prompt [0,1,2,3], 4 greedy tokens):",
             f"  {'item':<28}{'published':>14}{'measured':>14}"]
    for key, label in (("tokens", "generated tokens"), ("rows_recompute", "projected rows, recompute"),
                       ("rows_cache", "projected rows, cache"), ("pairs_recompute", "score pairs, recompute"),
                       ("pairs_cache", "score pairs, cache")):
        mark = "ok" if got[key] == PUBLISHED[key] else "MISMATCH"
        lines.append(f"  {label:<28}{str(PUBLISHED[key]):>14}{str(got[key]):>14}  {mark}")
    if got["tokens"] != got["tokens_recompute"]:
        lines.append("  MISMATCH: cached and recomputed generations differ")
    return lines
