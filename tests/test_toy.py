"""The toy preset against values computed by hand from the chapter's formulas and the
seed tutorial's published work counts (projected rows, score pairs)."""
from costcalc import calc

# Toy decoder: d=8, h_q=2, h_kv=1, d_h=4 (d_q=8, d_kv=4), L=2, m=16, V=6.
# P_lin = L(2 d d_q + 2 d d_kv + 3 d m) = 2 (128 + 64 + 384) = 1152.
P_LIN = 2 * (2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16)
D_H, HEADS, LAYERS = 4, 2, 2


def test_toy_p_lin(toy):
    assert P_LIN == 1152
    assert calc.executed_linear_params(toy) == P_LIN


def test_toy_prefill_of_four_tokens(toy):
    row = calc.prefill(toy, seq=4)
    assert row["linear_flops"] == 2 * 4 * P_LIN                 # 9216
    assert row["attention_flops"] == 2 * 2 * 8 * 4 * 5         # 2 L B d_q S(S+1) = 640
    assert row["lm_head_flops"] == 2 * 8 * 6                   # 96
    assert row["total_flops"] == 9216 + 640 + 96


def test_toy_generation_matches_tutorial_work_counts(toy):
    """Greedy generation of 4 tokens from a 4-token prompt, with the cache: the tutorial
    counts 14 projected rows (2 layers x (4+1+1+1)) and 112 score pairs
    (2 layers x 2 heads x (10+5+6+7)). Each projected row costs 2 x P_lin / L FLOPs and
    each score pair 4 d_h (QK^T and AV)."""
    total = calc.generate(toy, prompt=4, new=4)[-1]
    projected_rows, score_pairs = 14, 112
    assert total["linear_flops"] == projected_rows * 2 * P_LIN // LAYERS
    assert total["attention_flops"] == score_pairs * 4 * D_H
    # Full recompute each step instead (no cache): 44 rows, 296 pairs.
    recompute = [calc.prefill(toy, seq=n) for n in (4, 5, 6, 7)]
    assert sum(r["linear_flops"] for r in recompute) == 44 * 2 * P_LIN // LAYERS
    assert sum(r["attention_flops"] for r in recompute) == 296 * 4 * D_H


def test_toy_decode_step(toy):
    row = calc.decode(toy, context=4)
    assert row["attention_flops"] == 4 * LAYERS * 8 * 5       # 4 L B d_q (T+1)
    assert row["total_flops"] == 2 * P_LIN + 320 + 96
