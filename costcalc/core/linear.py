"""The weight matrices one decoder block runs, by name, and the FLOPs they cost for n tokens.

Each projection is a shape ``fan_in x fan_out`` used ``uses`` times per token (k for a
routed expert, 1 otherwise). Its name is the operator's name everywhere: a breakdown's
operators, the compiled recipes, and the verifier, which joins the FLOPs it counts on each
module to these names. Every linear term is derived from these shapes by ``matmul``; the
executed parameters per token, P_lin, are the linear FLOPs of one token divided by 2.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from .matmul import FLOPS_PER_MULTIPLY_ADD, matmul


@dataclass(frozen=True)
class Projection:
    name: str          # the operator: the module's name in the decoder, without layer or expert index
    term: str          # the breakdown term it is charged to
    fan_in: sp.Expr
    fan_out: sp.Expr
    uses: sp.Expr = sp.Integer(1)       # times a token goes through it (k for a routed expert)
    instances: sp.Expr = sp.Integer(1)  # copies of the weight in the model (E routed experts)
    weight: bool = True                 # False: a product with another module's weight slice
    over_cache: bool = False            # runs over every cached token too, not only the new ones
    mixes: bool = False                 # a product of two activations (no weight read): hyper-connections' comb


GQA = (
    Projection("q_proj", "attn_proj", s.d, s.d_q),
    Projection("k_proj", "attn_proj", s.d, s.d_kv),
    Projection("v_proj", "attn_proj", s.d, s.d_kv),
    Projection("o_proj", "attn_proj", s.d_q, s.d),
)

# GQA whose q_proj also gives a per-head sigmoid output gate (Qwen3-Next, Qwen3.5)
GATED_GQA = (Projection("q_proj", "attn_proj", s.d, 2 * s.d_q),) + GQA[1:]
# A per-head sigmoid output gate of its own: one output per query head (Step-3.7's g_proj)
HEAD_GATE = Projection("g_proj", "attn_proj", s.d, s.h_q)


def gqa(kind: Block) -> tuple[Projection, ...]:
    """A GQA kind's projections: q and k of d_h per head; v and o of d_h, or of d_v with ``dv``
    (MiMo-V2-Flash: h_kv d_v values, h_q d_v into o_proj); a gate in q_proj (``gated``) or its own
    per-head g_proj (``head_gate``)."""
    q = GATED_GQA[0] if kind.gated else GQA[0]
    v, o = ((Projection("v_proj", "attn_proj", s.d, s.h_kv * s.d_v), Projection("o_proj", "attn_proj", s.h_q * s.d_v, s.d))
            if kind.dv else GQA[2:])
    return (q, GQA[1], v, o) + ((HEAD_GATE,) if kind.head_gate else ())

_QK = s.d_nope + s.d_rope   # MLA per-head query/key width


def mla(q_lora: bool, form: str) -> tuple[Projection, ...]:
    """MLA's products per token. Naive: Q (direct or LoRA), the joint KV down-projection
    to the latent and the shared RoPE key, the KV up-projection of every token, O.
    Absorbed: the KV up-projection is not run per token; instead each head's query is
    taken into the latent (``q_absorb``: kv_b_proj's K part, d_nope x r_kv) and each head's
    latent output back to d_v (``v_absorb``: its V part, r_kv x d_v) -- products with the
    same weights, charged per token. Expanded: the naive products, but the latent is cached and
    ``kv_b_proj`` runs over every cached token as well as the new ones at each forward."""
    q = (Projection("q_a_proj", "attn_proj", s.d, s.r_q),
         Projection("q_b_proj", "attn_proj", s.r_q, s.h_q * _QK)) if q_lora else (
        Projection("q_proj", "attn_proj", s.d, s.h_q * _QK),)
    kv_a = Projection("kv_a_proj_with_mqa", "attn_proj", s.d, s.r_kv + s.d_rope)
    o = Projection("o_proj", "attn_proj", s.h_q * s.d_v, s.d)
    if form in ("naive", "expanded"):
        kv = (kv_a, Projection("kv_b_proj", "attn_proj", s.r_kv, s.h_q * (s.d_nope + s.d_v),
                               over_cache=form == "expanded"))
    else:
        kv = (kv_a,
              Projection("q_absorb", "attn_proj", s.d_nope, s.r_kv, s.h_q, weight=False),
              Projection("v_absorb", "attn_proj", s.r_kv, s.d_v, s.h_q, weight=False))
    return q + kv + (o,)


def indexer(q_lora: bool) -> tuple[Projection, ...]:
    """DeepSeek Sparse Attention's lightning indexer, by transformers' deepseek_v32 names: the
    index query of h_I heads of d_I from the MLA query latent (``wq_b``: r_q -> h_I d_I; from the
    hidden state, d -> h_I d_I, without a query LoRA), one shared index key per token (``wk``:
    d -> d_I) and a weight per head (``weights_proj``: d -> h_I). Its scores are ``core.indexer``."""
    return (Projection("indexer.wq_b", "indexer_proj", s.r_q if q_lora else s.d, s.h_I * s.d_I),
            Projection("indexer.wk", "indexer_proj", s.d, s.d_I),
            Projection("indexer.weights_proj", "indexer_proj", s.d, s.h_I))


def v4(kind: Block) -> tuple[Projection, ...]:
    """A DeepSeek-V4 layer's products per token, by transformers 5.23's module names (docs/cost-model.md,
    "DeepSeek-V4"):

    - the query through a rank-r_q LoRA (``q_a_proj``, ``q_b_proj``: h_q heads of d_h), one K=V head
      (``kv_proj``: d -> d_h), the grouped output: ``o_a_proj`` a block-diagonal bmm, G_o groups of
      h_q d_h / G_o each to r_o (G_o weights of that shape, each token through all of them), then
      ``o_b_proj`` G_o r_o -> d;
    - ``hca``: the compressor's ``kv_proj`` and ``gate_proj`` (d -> d_h each: the softmax-gated
      pooling of R_c tokens into one entry is elementwise); ``csa``: the same at 2 d_h (two
      overlapping series), and the indexer's own compressor (``indexer.kv_proj``,
      ``indexer.gate_proj``: d -> 2 d_I), its query (``indexer.q_b_proj``: r_q -> h_I d_I, from the
      query latent) and head weights (``indexer.weights_proj``: d -> h_I); its scores are
      ``core.indexer``'s;
    - the two hyper-connections, around the attention and around the FFN: ``fn`` projects the
      n_hc streams (n_hc d) to the n_hc (2 + n_hc) pre, post and comb weights; ``comb`` mixes the
      streams, per token an [n_hc, n_hc] x [n_hc, d] product of activations (no weight).
    """
    compressor, index = (), ()
    if kind.compressed:
        width = (2 if kind.attention == "csa" else 1) * s.d_h
        compressor = (Projection("compressor.kv_proj", "attn_proj", s.d, width),
                      Projection("compressor.gate_proj", "attn_proj", s.d, width))
    if kind.attention == "csa":
        index = (Projection("indexer.kv_proj", "indexer_proj", s.d, 2 * s.d_I),
                 Projection("indexer.gate_proj", "indexer_proj", s.d, 2 * s.d_I),
                 Projection("indexer.q_b_proj", "indexer_proj", s.r_q, s.h_I * s.d_I),
                 Projection("indexer.weights_proj", "indexer_proj", s.d, s.h_I))
    hyper = tuple(x for side in ("attn_hc", "ffn_hc") for x in (
        Projection(f"{side}.fn", "hyper", s.n_hc * s.d, s.n_hc * (2 + s.n_hc)),
        Projection(f"{side}.comb", "hyper", s.n_hc, s.n_hc, s.d, weight=False, mixes=True)))
    return (Projection("q_a_proj", "attn_proj", s.d, s.r_q),
            Projection("q_b_proj", "attn_proj", s.r_q, s.h_q * s.d_h),
            Projection("kv_proj", "attn_proj", s.d, s.d_h),
            Projection("o_a_proj", "attn_proj", s.h_q * s.d_h / s.G_o, s.r_o, s.G_o, s.G_o),
            Projection("o_b_proj", "attn_proj", s.G_o * s.r_o, s.d)) + compressor + index + hyper


# The hyper-connection head (DeepSeek-V4): once per model, before the final norm, the n_hc streams of
# every new token (n_hc d) to n_hc collapse weights.
HC_HEAD = Projection("hc_head", "hc_head", s.n_hc * s.d, s.n_hc)


# The projections of each linear-attention / state-space mixer (docs/cost-model.md), by the
# names transformers gives them.
MIXER = {
    # Gated DeltaNet: q, k, v and the output gate z in one matrix; beta and the decay input a
    "gdn": (Projection("in_proj_qkvz", "mixer_proj", s.d, 2 * s.h_lk * s.d_lk + 2 * s.h_lv * s.d_lv),
            Projection("in_proj_ba", "mixer_proj", s.d, 2 * s.h_lv),
            Projection("out_proj", "mixer_proj", s.h_lv * s.d_lv, s.d)),
    # Kimi Delta Attention: q, k, v; the per-channel decay and the output gate as rank-d_lk LoRAs
    "kda": (Projection("q_proj", "mixer_proj", s.d, s.h_lv * s.d_lk),
            Projection("k_proj", "mixer_proj", s.d, s.h_lv * s.d_lk),
            Projection("v_proj", "mixer_proj", s.d, s.h_lv * s.d_lv),
            Projection("f_a_proj", "mixer_proj", s.d, s.d_lk),
            Projection("f_b_proj", "mixer_proj", s.d_lk, s.h_lv * s.d_lk),
            Projection("b_proj", "mixer_proj", s.d, s.h_lv),
            Projection("g_a_proj", "mixer_proj", s.d, s.d_lv),
            Projection("g_b_proj", "mixer_proj", s.d_lv, s.h_lv * s.d_lv),
            Projection("o_proj", "mixer_proj", s.h_lv * s.d_lv, s.d)),
    # Mamba-2: x and the gate z (h_m d_m each), B and C (G N_s each), dt (h_m) in one matrix
    "mamba2": (Projection("in_proj", "mixer_proj", s.d, 2 * s.h_m * s.d_m + 2 * s.G * s.N_s + s.h_m),
               Projection("out_proj", "mixer_proj", s.h_m * s.d_m, s.d)),
    # Mamba-1: x and z; dt (rank r_dt), B and C from x; dt up to the inner width
    "mamba1": (Projection("in_proj", "mixer_proj", s.d, 2 * s.d_in),
               Projection("x_proj", "mixer_proj", s.d_in, s.r_dt + 2 * s.N_s),
               Projection("dt_proj", "mixer_proj", s.r_dt, s.d_in),
               Projection("out_proj", "mixer_proj", s.d_in, s.d)),
    # lightning attention: q, k, v in one matrix, a sigmoid output gate, the output
    "lightning": (Projection("qkv_proj", "mixer_proj", s.d, 3 * s.d_q),
                  Projection("output_gate", "mixer_proj", s.d, s.d_q),
                  Projection("out_proj", "mixer_proj", s.d_q, s.d)),
    # gated short convolution: B, C and x in one matrix, the output; d_c = d channels (spec.Group.numbers),
    # a name of its own so that a layout splits them apart from the residual's d
    "shortconv": (Projection("in_proj", "mixer_proj", s.d, 3 * s.d_c),
                  Projection("out_proj", "mixer_proj", s.d_c, s.d)),
}

DENSE_FFN = (
    Projection("gate_proj", "ffn", s.d, s.m),
    Projection("up_proj", "ffn", s.d, s.m),
    Projection("down_proj", "ffn", s.m, s.d),
)

# A non-gated MLP (GPT-NeoX, StarCoder2, Apertus): two matrices of width m.
MLP_FFN = (
    Projection("up_proj", "ffn", s.d, s.m),
    Projection("down_proj", "ffn", s.m, s.d),
)

# MoE: a router, then k of E SwiGLU experts per token.
MOE_FFN = (
    Projection("router", "router", s.d, s.E),
    Projection("experts.gate_proj", "experts", s.d, s.m_e, s.k, s.E),
    Projection("experts.up_proj", "experts", s.d, s.m_e, s.k, s.E),
    Projection("experts.down_proj", "experts", s.m_e, s.d, s.k, s.E),
)

# Shared experts: E_s SwiGLU experts of width m_s that every token runs.
SHARED_FFN = (
    Projection("shared_experts.gate_proj", "shared_experts", s.d, s.m_s, s.E_s, s.E_s),
    Projection("shared_experts.up_proj", "shared_experts", s.d, s.m_s, s.E_s, s.E_s),
    Projection("shared_experts.down_proj", "shared_experts", s.m_s, s.d, s.E_s, s.E_s),
)
# Non-gated (plain MLP) experts, routed and shared: up and down only (Nemotron-H).
PLAIN_MOE_FFN = (MOE_FFN[0],) + MOE_FFN[2:]
PLAIN_SHARED_FFN = SHARED_FFN[1:]
SHARED_GATE = Projection("shared_expert_gate", "shared_experts", s.d, sp.Integer(1))

LM_HEAD = Projection("lm_head", "lm_head", s.d, s.V)

# A multi-token-prediction module's input projection (DeepSeek-V3's and GLM's ``eh_proj``, Qwen3-Next's
# ``mtp.fc``): the main model's last hidden state and the next token's embedding, each normed and
# concatenated (2d), down to d before the module's decoder block. Charged to the draft it makes.
EH_PROJ = Projection("eh_proj", "draft", 2 * s.d, s.d)


def block(kind: Block) -> tuple[Projection, ...]:
    """The projections of one decoder block of the given kind."""
    if kind.mtp:
        return (EH_PROJ,) + block(replace(kind, mtp=False))
    attention = (gqa(kind) if kind.attention in ("gqa", "window", "chunk") else
                 mla(kind.q_lora, kind.form) if kind.attention == "mla" else v4(kind) if kind.v4 else ())
    if kind.k_eq_v:     # values from the key projection (Gemma 4's attention_k_eq_v): no v_proj
        attention = tuple(p for p in attention if p.name != "v_proj")
    attention += indexer(kind.q_lora) if kind.sparse else ()
    attention += MIXER.get(kind.mixer, ())
    if kind.ffn in ("dense", "mlp", "none"):
        return attention + {"dense": DENSE_FFN, "mlp": MLP_FFN, "none": ()}[kind.ffn]
    experts, shared = (PLAIN_MOE_FFN, PLAIN_SHARED_FFN) if kind.plain else (MOE_FFN, SHARED_FFN)
    return attention + experts + (shared if kind.shared else ()) + ((SHARED_GATE,) if kind.shared_gate else ())


def operators(kind: Block, n: sp.Expr, past: sp.Expr = sp.Integer(0)) -> dict[str, sp.Expr]:
    """Linear FLOPs of each projection for n new tokens after ``past`` cached ones through all
    L layers, by operator name (a projection ``over_cache`` runs over the past tokens too)."""
    return {p.name: s.L * matmul((n + past if p.over_cache else n) * p.uses, p.fan_in, p.fan_out)
            for p in block(kind)}


def term_of(kind: Block) -> dict[str, str]:
    """The breakdown term of each operator of a block (and of the LM head)."""
    heads = {LM_HEAD.name: LM_HEAD.term, **({HC_HEAD.name: HC_HEAD.term} if kind.v4 else {})}
    return {**{p.name: p.term for p in block(kind)}, **heads}


def linear_terms(kind: Block, n: sp.Expr) -> dict[str, sp.Expr]:
    """Block linear FLOPs for n tokens through all L layers, per breakdown term."""
    terms: dict[str, sp.Expr] = {}
    for p in block(kind):
        terms[p.term] = terms.get(p.term, sp.Integer(0)) + s.L * matmul(n * p.uses, p.fan_in, p.fan_out)
    return terms


def lm_head_rows(logits: str, new: sp.Expr) -> sp.Expr:
    """LM-head rows per sequence of a forward of ``new`` tokens: one (``last``), ``new``
    (``all``), or none (``none``: a chunk before the prompt's last)."""
    rows = {"last": sp.Integer(1), "all": new, "none": sp.Integer(0)}
    if logits not in rows:
        raise ValueError(f"logits must be one of {', '.join(rows)}, got {logits!r}")
    return rows[logits]


def lm_head_flops(rows: sp.Expr) -> sp.Expr:
    """LM head FLOPs for the given number of logit rows (tied or not, the same)."""
    return matmul(rows, LM_HEAD.fan_in, LM_HEAD.fan_out)


def p_lin(kind: Block) -> sp.Expr:
    """Linear parameters executed per token, summed over layers (the chapter's P_lin); a product of
    two activations (the hyper-connections' comb mix) has no parameters and is left out."""
    one_token = sum(s.L * matmul(p.uses, p.fan_in, p.fan_out) for p in block(kind) if not p.mixes)
    return sp.expand(one_token / FLOPS_PER_MULTIPLY_ADD)


def once_params(kind: Block) -> dict[str, sp.Expr]:
    """Weights a model holds once whatever its groups (``vocab.ONCE``) beside the LM head: DeepSeek-V4's
    hyper-connection head, which every token runs."""
    return {HC_HEAD.name: sp.expand(HC_HEAD.fan_in * HC_HEAD.fan_out)} if kind.v4 else {}


def matrices(kind: Block) -> dict[str, sp.Expr]:
    """Each weight matrix of one layer by operator (the naive form: the absorbed MLA products use
    kv_b_proj's slices): ``<op>.fan_in``, ``<op>.fan_out`` and ``<op>.instances`` (E routed experts).
    A weight format's bytes are per matrix (``costcalc.weights``), so memory and the roofline take
    the shapes, not only their product."""
    out: dict[str, sp.Expr] = {}
    for p in block(kind.with_form("naive")) + ((HC_HEAD,) if kind.v4 else ()):   # hc_head: once a model (vocab.ONCE)
        if p.weight:
            out.update({f"{p.name}.fan_in": p.fan_in, f"{p.name}.fan_out": p.fan_out,
                        f"{p.name}.instances": p.instances})
    return out


def block_params(kind: Block) -> dict[str, sp.Expr]:
    """Weights of the L blocks: ``total`` (every expert) and ``active`` (what a token runs).

    Counted from the same projection shapes as the FLOPs, in the naive form (the absorbed
    MLA form reuses the naive weights); matrices only -- norms and biases are not counted.
    DeepSeek-V4's hyper-connection head (``hc_head``, once per model whatever its groups: ``vocab.ONCE``)
    is given beside them.
    """
    projections = [p for p in block(kind.with_form("naive")) if p.weight]
    total = sum(p.fan_in * p.fan_out * p.instances for p in projections)
    active = sum(p.fan_in * p.fan_out * p.uses for p in projections)
    return {"block_total": sp.expand(s.L * total), "block_active": sp.expand(s.L * active), **once_params(kind)}
