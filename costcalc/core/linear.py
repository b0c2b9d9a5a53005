"""The weight matrices one decoder block runs, and the FLOPs they cost for n tokens.

Each projection is a shape ``fan_in x fan_out`` used ``uses`` times per token (k for a
routed expert, 1 otherwise). Every linear term is derived from these shapes by
``matmul``; the executed parameters per token, P_lin, are the linear FLOPs of one
token divided by 2.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .. import symbols as s
from ..vocab import ARCHS
from .matmul import FLOPS_PER_MULTIPLY_ADD, matmul


@dataclass(frozen=True)
class Projection:
    name: str
    term: str          # the breakdown term it is charged to
    fan_in: sp.Expr
    fan_out: sp.Expr
    uses: sp.Expr = sp.Integer(1)   # times a token goes through it


ATTENTION_PROJECTIONS = (
    Projection("q_proj", "attn_proj", s.d, s.d_q),
    Projection("k_proj", "attn_proj", s.d, s.d_kv),
    Projection("v_proj", "attn_proj", s.d, s.d_kv),
    Projection("o_proj", "attn_proj", s.d_q, s.d),
)

DENSE_FFN = (
    Projection("gate_proj", "ffn", s.d, s.m),
    Projection("up_proj", "ffn", s.d, s.m),
    Projection("down_proj", "ffn", s.m, s.d),
)

# Homogeneous MoE, no shared expert: a router, then k of E SwiGLU experts per token.
MOE_FFN = (
    Projection("router", "router", s.d, s.E),
    Projection("expert.gate_proj", "experts", s.d, s.m_e, s.k),
    Projection("expert.up_proj", "experts", s.d, s.m_e, s.k),
    Projection("expert.down_proj", "experts", s.m_e, s.d, s.k),
)

LM_HEAD = Projection("lm_head", "lm_head", s.d, s.V)


def block(arch: str) -> tuple[Projection, ...]:
    """The projections of one decoder block of the given architecture."""
    if arch == "dense":
        return ATTENTION_PROJECTIONS + DENSE_FFN
    if arch == "moe":
        return ATTENTION_PROJECTIONS + MOE_FFN
    raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")


def linear_terms(arch: str, n: sp.Expr) -> dict[str, sp.Expr]:
    """Block linear FLOPs for n tokens through all L layers, per breakdown term."""
    terms: dict[str, sp.Expr] = {}
    for p in block(arch):
        cost = s.L * matmul(n * p.uses, p.fan_in, p.fan_out)
        terms[p.term] = terms.get(p.term, sp.Integer(0)) + cost
    return terms


def lm_head_flops(rows: sp.Expr) -> sp.Expr:
    """LM head FLOPs for the given number of logit rows (tied or not, the same)."""
    return matmul(rows, LM_HEAD.fan_in, LM_HEAD.fan_out)


def p_lin(arch: str) -> sp.Expr:
    """Linear parameters executed per token, summed over layers (the chapter's P_lin)."""
    one_token = sum(linear_terms(arch, sp.Integer(1)).values())
    return sp.expand(one_token / FLOPS_PER_MULTIPLY_ADD)
