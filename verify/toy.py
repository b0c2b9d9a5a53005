"""The seed tutorial's published table: tokens and work counts, recompute vs cache."""
from __future__ import annotations

import torch

from costcalc import calc

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


def work_counts(model, spec, prompt=PROMPT, new: int = 4) -> dict:
    """Generated tokens, and projected rows / score pairs read from the counted FLOPs, in the units
    the core gives for one token (``calc.prefill`` at S = 1, per layer and head): rows = counted
    q_proj FLOPs / one row's; pairs = counted causal attention / one query-key pair's."""
    one = calc.operators(spec, "prefill", batch=1, seq=1)       # one token: one row, one pair per head
    per_row = one["q_proj"] // spec["L"]
    per_pair = one["attention"] // (spec["L"] * spec["h_q"])

    def measure(fn):
        with Counter(model) as counter:
            out = fn()
        counted = counter.result()
        return out, counted.operators["q_proj"] // per_row, counted.attention["causal"] // per_pair

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


def tutorial_table(model, spec) -> list[str]:
    got = work_counts(model, spec)
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
