"""Parameter counts of a model, from the same projection shapes as the FLOPs, and the 6P rule."""
from __future__ import annotations

from typing import Any

from .evaluate import Options, Query
from .spec import ModelSpec


def executed_linear_params(spec: ModelSpec, mla: str = "naive") -> int:
    """P_lin: block linear parameters a token runs through (active experts only), i.e. the
    linear FLOPs of one token / 2 (MLA: in the given form; absorbed runs other products)."""
    return _p_lin(Query(spec, "prefill", Options(mla=mla)))


def _p_lin(query: Query) -> int:
    """The groups' P_lin, and DeepSeek-V4's hyper-connection head once (its first group's)."""
    return sum(sum(recipe.evaluate(g.numbers()).values()) for g, recipe in query.recipes("p_lin"))


def parameters(spec: ModelSpec) -> dict[str, Any]:
    """Weights: ``total_params`` (every expert; a tied LM head once), ``active_params`` (the
    block weights a token runs plus the LM head), and the embedding and LM head apart.
    Matrices only: norms and biases are not counted (well under 0.1% of any preset)."""
    blocks_total = blocks_active = 0
    for g, recipe in Query(spec, "prefill").recipes("params"):
        got = recipe.evaluate(g.numbers())
        head = got.get("hc_head", 0)          # DeepSeek-V4's hyper-connection head, once (first group)
        blocks_total += got["block_total"] + head
        blocks_active += got["block_active"] + head
    embedding = lm_head = spec["d"] * spec["V"]
    out = {"total_params": blocks_total + embedding + (0 if spec.tied_embeddings else lm_head),
           "active_params": blocks_active + lm_head,
           "embedding_params": embedding, "lm_head_params": lm_head,
           "tied_embeddings": spec.tied_embeddings,
           "block_params": blocks_total, "block_active_params": blocks_active}
    return out | (mtp_parameters(spec) if spec.mtp is not None else {})


def mtp_parameters(spec: ModelSpec) -> dict[str, int]:
    """A model's multi-token-prediction modules, apart from the decoder's counts: ``mtp_params``
    (every module's eh_proj and decoder block, all experts) and ``mtp_active_params`` (what one
    draft runs: the first module's eh_proj and the block weights a token runs; the LM head it
    shares is the decoder's). The embedding and LM head a module reads are the model's: a
    checkpoint that stores copies of them per module (DeepSeek-V3's layer 61) holds
    ``mtp.count * 2 d V`` more, which neither count includes."""
    (group, recipe), = Query(spec, "prefill").modules("params")
    one = recipe.evaluate({**group.numbers(), "L": 1})
    return {"mtp_params": group.count * one["block_total"], "mtp_active_params": one["block_active"]}


def rule_6p(spec: ModelSpec, tokens: int, mla: str = "auto") -> int:
    """The 6P-per-token rule of thumb, P = executed linear + LM head parameters per token."""
    return 6 * (_p_lin(Query(spec, "train", Options(mla=mla))) + spec["d"] * spec["V"]) * tokens
