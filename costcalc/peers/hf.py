"""What a Hugging Face transformers 5.23 decoder executes, module by module, in multiply-adds:
the ground the four executed counters (torch, DeepSpeed, calflops, fvcore) stand on.

Written from the modelling code (``modeling_llama.py``, ``modeling_mixtral.py``,
``modeling_deepseek_v3.py``, ``integrations/moe.py``, ``cache_utils.py`` of transformers 5.23),
independently of costcalc's core, so that a recipe's differences are checked against it:

- every ``nn.Linear``: q/k/v/o (MLA: q_a/q_b or q, kv_a, kv_b, o), gate/up/down (a non-gated
  MLP: up/down, ``modeling_gpt_neox.py``, ``modeling_starcoder2.py``), the router
  ``d x E``, shared experts and their ``d x 1`` gate, the LM head (on every position in a
  plain forward; on the last in ``generate()``, which passes ``logits_to_keep=1``);
- MLA caches the latent and runs ``kv_b_proj`` over every cached latent at each forward
  (``modeling_deepseek_v3.py``: the cache holds ``compressed_kv``);
- attention multiplies the whole rectangle, masked: a query multiplies every key in the
  cache plus the new ones (the step's own key is in the cache before attention: T+1 keys);
  a sliding-window layer's cache (``DynamicSlidingWindowLayer``) is the rolling one
  (docs/cost-model.md, "Sliding windows");
- routed experts: k per token, whatever the routing;
- elementwise operations the patching counters see: SiLU on each MLP's gate, the eager
  attention softmax over the scores, the softmax over the router logits (Mixtral-style
  routers; DeepSeek-V3 scores with a sigmoid, not a counted softmax).
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Case, Costcalc, Extra


@dataclass(frozen=True)
class Run:
    """What the forwards of a workload add up to: ``tokens`` through the blocks, LM-head
    ``rows``, ``latents`` through kv_b_proj, and query-key ``pairs`` per window (None: a
    layer without one)."""
    tokens: int
    rows: int
    latents: int
    pairs: dict


def sum_min(lo: int, hi: int, w: int) -> int:
    """sum(min(p, w) for p in lo..hi)."""
    if hi < lo:
        return 0
    top = min(hi, w)
    below = (lo + top) * (top - lo + 1) // 2 if top >= lo else 0
    return below + w * max(0, hi - max(lo - 1, w))


def run(case: Case, logits_all: bool = True) -> Run:
    """The forwards HF runs for a case: a prefill or training forward of S (logits on every
    position unless ``logits_all`` is False), a decode step after T, or ``generate()``: a
    prefill with ``logits_to_keep=1`` and N-1 steps, step j after S+j-1 cached tokens."""
    b, s, t, n = case.batch, case.seq, case.context, case.new
    windows = {g.sizes["W"] for g in case.spec.groups if g.block.attention == "window"}
    if case.decoding:
        pairs = {None: b * (t + 1), **{w: b * (min(t, w - 1) + 1) for w in windows}}
        return Run(b, b, b * (t + 1), pairs)
    if case.generating:
        steps = n - 1
        full = b * (s * s + steps * s + steps * (steps + 1) // 2)
        pairs = {None: full, **{w: b * (s * s + sum_min(s + 1, s + steps, w)) for w in windows}}
        latents = b * (s + steps * s + steps * (steps + 1) // 2)
        return Run(b * (s + steps), b * n, latents, pairs)
    pairs = {None: b * s * s, **{w: b * s * s for w in windows}}   # a prefill caches nothing before it
    return Run(b * s, b * s if logits_all else b, b * s, pairs)


def macs(case: Case, r: Run) -> dict[str, int]:
    """Multiply-adds by kind (``linear``: every nn.Linear but the routed experts; ``experts``;
    ``attention``: QK^T and AV) and elementwise element counts (``silu``, ``softmax``,
    ``router_softmax``), summed over the layer groups."""
    out = dict(linear=r.rows * case.spec["d"] * case.spec["V"], experts=0, attention=0,
               silu=0, softmax=0, router_softmax=0)
    for g in case.spec.groups:
        z, b, L, d = g.sizes, g.block, g.count, g.sizes["d"]
        pairs = r.pairs[z["W"] if b.attention == "window" else None]
        if b.attention == "mla":
            h, qk = z["h_q"], z["d_nope"] + z["d_rope"]
            q = d * z["r_q"] + z["r_q"] * h * qk if b.q_lora else d * h * qk
            out["linear"] += L * r.tokens * (q + d * (z["r_kv"] + z["d_rope"]) + h * z["d_v"] * d)
            out["linear"] += L * r.latents * z["r_kv"] * h * (z["d_nope"] + z["d_v"])
            out["attention"] += L * pairs * h * (qk + z["d_v"])
        else:
            h, dq, dkv = z["h_q"], z["h_q"] * z["d_h"], z["h_kv"] * z["d_h"]
            out["linear"] += L * r.tokens * (2 * d * dq + 2 * d * dkv)
            out["attention"] += L * pairs * h * 2 * z["d_h"]
        out["softmax"] += L * pairs * h
        if b.ffn == "dense":
            out["linear"] += L * r.tokens * 3 * d * z["m"]
            out["silu"] += L * r.tokens * z["m"]
            continue
        if b.ffn == "mlp":                        # up, activation, down (GPT-NeoX, StarCoder2, Apertus)
            out["linear"] += L * r.tokens * 2 * d * z["m"]
            continue
        out["linear"] += L * r.tokens * d * z["E"]
        out["experts"] += L * r.tokens * z["k"] * 3 * d * z["m_e"]
        out["silu"] += L * r.tokens * z["k"] * z["m_e"]
        if not b.shared or b.shared_gate:         # softmax routers (Mixtral, Qwen-MoE, OLMoE)
            out["router_softmax"] += L * r.tokens * z["E"]
        if b.shared:
            out["linear"] += L * r.tokens * z["E_s"] * 3 * d * z["m_s"] + (L * r.tokens * d if b.shared_gate else 0)
            out["silu"] += L * r.tokens * z["E_s"] * z["m_s"]
    return out


def counted(m: dict[str, int], cc: Costcalc, attention: str | None = None,
            experts: str | None = None) -> tuple[int, list[Extra]]:
    """What an executed counter sees of ``macs``: every nn.Linear, plus the attention products and
    the routed experts unless the tool misses them -- ``attention`` / ``experts`` say why it does
    (None: it counts them). Returns those multiply-adds and, for each term missed, the difference
    ``<term> not counted (<why>)`` (costcalc's term at the path's end, taken away)."""
    missed = {"attention": ("attention", attention), "experts": ("routed experts", experts)}
    seen = m["linear"] + sum(m[term] for term, (_, why) in missed.items() if why is None)
    extras = [(f"{name} not counted ({why})", lambda c, term=term: -cc.term(term, c))
              for term, (name, why) in missed.items() if why is not None]
    return seen, extras


def sdpa_falls_back(case: Case) -> bool:
    """On CPU, SDPA runs a fused kernel (counted by no tool) when q, k and v share one head
    dim; MLA's d_nope + d_rope != d_v falls back to the math path, which torch counts."""
    return any(g.block.attention == "mla" and g.sizes["d_nope"] + g.sizes["d_rope"] != g.sizes["d_v"]
               for g in case.spec.groups)


# The costcalc path to what HF executes: its MLA form, its window cache, the rectangle, its logits.
PATH = [("MLA per pair naive, not absorbed", {"mla": "naive"}),
        ("kv_b_proj re-expands the cached latents", {"mla": "expanded"}),
        ("rolling window cache (W-1 keys)", {"window_cache": "rolling"}),
        ("full square", {"convention": "full"})]
LOGITS = ("LM head on all positions", {"logits": "all"})


def path(case: Case) -> list:
    """The costcalc steps from the default to HF's execution of the case."""
    return PATH + ([LOGITS] if case.prompt_logits else [])


SETUP = ("Hugging Face transformers 5.23, attn_implementation={attention}, "
         "experts_implementation={experts}")
