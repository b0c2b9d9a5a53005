"""costcalc/core/linear.py: the projection table -- each block kind's projections, their
FLOPs by operator and by term, the executed parameters P_lin and the weights."""
import pytest
import sympy as sp

from costcalc import symbols as s
from costcalc.blocks import parse
from named import linear

block_params, linear_terms, operators = linear.block_params, linear.linear_terms, linear.operators


def same(a, b):
    return sp.expand(a - b) == 0


def test_the_non_gated_mlp_has_two_matrices():
    terms = linear_terms("gqa.mlp", 1)
    assert sp.expand(terms["ffn"] - 4 * s.L * s.d * s.m) == 0
    params = block_params("window.mlp")["block_total"]
    gated = block_params("window.dense")["block_total"]
    assert sp.expand(gated - params - s.L * s.d * s.m) == 0


def test_shared_experts_and_gate_cost_per_token():
    terms = linear_terms("gqa.moe_shared_gate", 1)
    assert same(terms["shared_experts"], s.L * (6 * s.E_s * s.d * s.m_s + 2 * s.d))
    assert same(terms["experts"], 6 * s.L * s.k * s.d * s.m_e)
    assert same(terms["router"], 2 * s.L * s.d * s.E)


@pytest.mark.parametrize("arch", ["gqa.dense", "window.moe", "chunk.mlp", "mla_q.moe_shared_gate",
                                  "mla-absorbed.dense", "mla_q-expanded.moe_shared"])
def test_the_operators_add_up_to_the_terms_and_p_lin_is_one_token_of_them(arch):
    ops, of = operators(arch, s.S), linear.term_of(arch)
    assert set(ops) | {"lm_head"} == set(of) and of["lm_head"] == "lm_head"
    by_term = {}
    for name, flops in ops.items():
        by_term[of[name]] = by_term.get(of[name], 0) + flops
    terms = linear_terms(arch, s.S)
    assert by_term.keys() == terms.keys() and all(same(by_term[t], terms[t]) for t in terms)
    assert same(2 * linear.p_lin(arch), sum(linear_terms(arch, 1).values()))


def test_only_the_expanded_mla_runs_a_projection_over_the_cache():
    for arch in ("gqa.dense", "mla_q.dense", "mla_q-absorbed.dense"):
        assert operators(arch, s.C, s.T) == operators(arch, s.C)
    expanded, naive = operators("mla_q-expanded.dense", s.C, s.T), operators("mla_q.dense", s.C)
    assert same(expanded["kv_b_proj"] - naive["kv_b_proj"], 2 * s.L * s.T * s.r_kv * s.h_q * (s.d_nope + s.d_v))
    assert all(same(expanded[k], naive[k]) for k in naive if k != "kv_b_proj")


def test_weights_count_every_expert_and_a_token_runs_k():
    params = block_params("gqa.moe")
    assert same(params["block_total"] - params["block_active"], 3 * s.L * (s.E - s.k) * s.d * s.m_e)
    assert block_params("mla_q-absorbed.dense") == block_params("mla_q.dense")   # the naive weights


def test_lm_head_rows_by_logits_mode():
    assert linear.lm_head_rows("last", s.S) == 1 and linear.lm_head_rows("all", s.S) == s.S
    assert linear.lm_head_rows("none", s.S) == 0
    with pytest.raises(ValueError, match="logits must be one of last, all, none"):
        linear.lm_head_rows("some", s.S)
    assert same(linear.lm_head_flops(s.S), 2 * s.S * s.d * s.V)


def test_a_block_is_its_attention_projections_then_its_ffns():
    names = [p.name for p in linear.block(parse("gqa.moe_shared_gate"))]
    assert names[:4] == ["q_proj", "k_proj", "v_proj", "o_proj"] and names[-1] == "shared_expert_gate"
