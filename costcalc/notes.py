"""The conventions every printed number is labelled with, written once."""
from __future__ import annotations

COUNTED = ("FLOPs = 2 x multiply-adds, matrix products only: block linear layers, "
           "attention QK^T and AV, LM head.")
NOT_COUNTED = ("Not counted: embedding lookup, norms, softmax, RoPE, activations, "
               "router top-k selection, sampling, bias adds, data movement.")
CONVENTIONS = {
    "causal": "causal = legal query-key pairs only (future keys skipped: the ideal effective work)",
    "full": "full = the whole score rectangle the shapes imply (dense masked matmul, torch's SDPA counter)",
    "tiled": "tiled = the query x key tiles a block-skipping kernel visits (tiles aligned at key 0; see the tile column)",
}
LOGITS = {
    "last": "logits last = LM head on each sequence's last position",
    "all": "logits all = LM head on every position",
}
CROSSOVER = ("FLOPs crossovers for one sequence, LM head excluded -- not time: attention can "
             "dominate latency much earlier through KV-cache bandwidth. decode_t_equal = keys "
             "read per decode step (the step's own key included) at which attention equals linear "
             "FLOPs (exact, tokens); context = the cached tokens before that step, keys - 1, what "
             "'decode --context' takes. Summed over layer groups; never = sliding windows keep "
             "attention below the linear layers at every length.")
TRAIN = ("train = forward with logits at every position x 3 (forward + backward); "
         "rule_6p = 6 x (P_lin + d V) x tokens. Attention and the LM head are why they differ.")


def footer(conventions: set[str], logits: set[str]) -> list[str]:
    lines = [COUNTED, NOT_COUNTED]
    lines += [CONVENTIONS[c] for c in sorted(conventions) if c in CONVENTIONS]
    lines += [LOGITS[x] for x in sorted(logits) if x in LOGITS]
    return lines
TIMING = ("timings: tflops_per_s_causal and tflops_per_s_full divide the causal and the full FLOPs "
          "count by the measured time; tflops_per_s and peak_fraction use the causal count (the work the "
          "model needs), peak_fraction against the GEMM peak measured in the same run.")
