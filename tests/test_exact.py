"""Evaluation is exact: integers in, integers out, past 2^63."""
from fractions import Fraction

from costcalc import calc, presets


def test_405b_prefill_128k_batch_64_is_exact_past_int64():
    spec = presets.load("llama-3.1-405b")
    B, S = 64, 128 * 1024
    L, d, dq, dkv, m, V = 126, 16384, 128 * 128, 8 * 128, 53248, 128256
    P = L * (2 * d * dq + 2 * d * dkv + 3 * d * m)
    expected = 2 * B * S * P + 2 * L * B * dq * S * (S + 1) + 2 * B * d * V
    row = calc.prefill(spec, seq=S, batch=B)
    assert expected > 2**63
    assert type(row["total_flops"]) is int
    assert row["total_flops"] == expected


def test_t_equal_is_an_exact_rational():
    spec = presets.load("qwen2.5-7b")
    L, d, dq, dkv, m = 28, 3584, 3584, 512, 18944
    P = L * (2 * d * dq + 2 * d * dkv + 3 * d * m)
    row = calc.crossover(spec)[0]
    assert row["quantity"] == "decode_t_equal"
    assert Fraction(row["exact"]) == Fraction(P, 2 * L * dq)
