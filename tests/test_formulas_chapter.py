"""The derived closed forms equal the chapter's boxed formulas (seed chapter 9)."""
import sympy as sp

from costcalc import symbols as s
from costcalc.blocks import Block
from named import attention, crossover as cx, linear, workloads as w

attention_sum, keys_read, p_lin = attention.attention_sum, attention.keys_read, linear.p_lin

L, d, d_q, d_kv, m, E, k, m_e, V = s.L, s.d, s.d_q, s.d_kv, s.m, s.E, s.k, s.m_e, s.V
B, S, T, C, N = s.B, s.S, s.T, s.C, s.N

CHAPTER_P_LIN = {
    "dense": L * (2 * d * d_q + 2 * d * d_kv + 3 * d * m),
    "moe": L * (2 * d * d_q + 2 * d * d_kv + 3 * k * d * m_e + d * E),
}


def same(a, b):
    return sp.expand(a - b) == 0


def test_p_lin_matches_chapter():
    for arch, expected in CHAPTER_P_LIN.items():
        assert same(p_lin(arch), expected)


def test_prefill_boxed_formula():
    for arch, P in CHAPTER_P_LIN.items():
        causal = w.prefill(arch, "causal", "last")
        assert same(causal.total, 2 * B * S * P + 2 * L * B * d_q * S * (S + 1) + 2 * B * d * V)
        full = w.prefill(arch, "full", "last")
        assert same(full.terms["attention"], 4 * L * B * d_q * S**2)
        every = w.prefill(arch, "causal", "all")
        assert same(every.terms["lm_head"], 2 * B * S * d * V)


def pairs(convention, past, new):
    return attention_sum(convention, Block(), sp.sympify(past), sp.sympify(new))


def test_pair_counts():
    assert same(pairs("causal", 0, S), S * (S + 1) / 2)
    assert same(pairs("full", 0, S), S**2)
    assert same(pairs("causal", T, C), C * T + C * (C + 1) / 2)
    assert same(pairs("full", T, C), C * (T + C))
    assert same(pairs("causal", T, 1), T + 1)
    # the one rule: a query at position p reads p keys (causal), all past + new (full)
    p = s.p
    assert keys_read("causal", Block(), p, T, C) == p and keys_read("full", Block(), p, T, C) == T + C


def test_cached_prefix_chunk():
    bd = w.cached_prefill("dense", "causal", "last")
    assert same(bd.linear, 2 * B * C * CHAPTER_P_LIN["dense"])
    assert same(bd.terms["attention"], 4 * L * B * d_q * (C * T + C * (C + 1) / 2))


def test_decode_step_boxed_formula():
    for arch, P in CHAPTER_P_LIN.items():
        for convention in ("causal", "full"):
            step = w.decode(arch, convention)
            assert same(step.total, 2 * B * P + 4 * L * B * d_q * (T + 1) + 2 * B * d * V)


def test_generation_decode_phase():
    for arch, P in CHAPTER_P_LIN.items():
        phase = w.decode_phase(arch, "causal")
        assert same(phase.linear + phase.terms["lm_head"], 2 * B * (N - 1) * (P + d * V))
        assert same(phase.terms["attention"], 4 * L * B * d_q * ((N - 1) * S + N * (N - 1) / 2))


def test_t_equal():
    for arch, P in CHAPTER_P_LIN.items():
        assert same(cx.decode_t_equal(arch), P / (2 * L * d_q))
        # prefill: 2 S P = 2 L d_q S (S + 1) (causal); 2 S P = 4 L d_q S^2 (full)
        assert same(cx.prefill_crossover(arch, "causal"), P / (L * d_q) - 1)
        assert same(cx.prefill_crossover(arch, "full"), P / (2 * L * d_q))


def test_train_is_three_forwards_with_all_logits():
    fwd = w.prefill("moe", "causal", "all")
    assert same(w.train("moe", "causal").total, 3 * fwd.total)
