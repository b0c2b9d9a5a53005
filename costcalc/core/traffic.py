"""Memory traffic of each operator of a forward, as element counts (bytes: ``costcalc.roofline``).

For ``batch`` sequences running ``new`` tokens after ``past`` cached ones, per operator:

- ``weight``: the elements of its matrix, read once per forward whatever the number of
  tokens. A routed expert's projection counts ONE expert here; the evaluation multiplies it
  by the experts the forward touches (expected or worst case, ``--routing``). MLA's absorbed
  products read the slices of ``kv_b_proj`` they use.
- ``activation``: its input and output rows (a routed expert: k rows per token).
- attention (a fused kernel: Q, K, V in, O out; no score matrix in memory): Q and O as
  activations; ``kv_read`` the keys it loads (``attention.keys_loaded``) times the K/V width
  per key; ``kv_write`` the new tokens' K/V (or MLA latent) written to the cache.
- the LM head: its matrix, and its rows in and out.

Widths per key: GQA reads and writes K and V, ``2 h_kv d_h``; MLA in the naive form caches
and reads the up-projected K and V (``h_q (d_nope + d_rope + d_v)``); absorbed, the latent and
the RoPE key (``r_kv + d_rope``). Every count is an integer polynomial (tile sums aside), so
the compiled recipes evaluate it exactly, like the FLOPs.

A sparse MLA layer (DeepSeek Sparse Attention) also keeps an index key of ``d_I`` per token
(``indexer.kv_write``, in the KV dtype here: the reference keeps it in fp8 with an fp32 scale per
128); its indexer reads the whole index-key cache at every forward (``indexer.kv_read``:
``past + new`` keys -- it scores every legal key) and its index queries and head weights as
activations; the main attention loads only the latent rows selected (``attention.keys_loaded``).
The scores and the selected indices are not counted as traffic.

A DeepSeek-V4 layer (``core.compressed``) reads one K=V vector of ``d_h`` per key (window and
compressed entries alike) and writes the new tokens' window keys (``attention.kv_write``); its
compressor writes the entries the forward completes, ``floor((past + new) / R_c) - floor(past / R_c)``
of ``d_h`` (``compressor.kv_proj.kv_write``); a ``csa`` indexer as many index keys of ``d_I``
(``indexer.kv_write``) and reads every index key there is (``indexer.kv_read``). The hyper-
connections' ``comb`` mixes activations: no weight read. The R_c-token buffers the compressors keep
between forwards are not counted.

A linear-attention or state-space mixer (``core.mixers``) has no KV cache: its ``scan``
reads the recurrent state once per forward when a token is cached and writes it once
(``state_read``, ``state_write``: fixed in the context), and its ``conv`` reads and writes
the convolution window (``kv_read``, ``kv_write``: the cache in the KV dtype); both read
their inputs and write their outputs as activations.
"""
from __future__ import annotations

import sympy as sp

from .. import symbols as s
from ..blocks import Block
from ..vocab import Convention, Logits
from .attention import expand, head_dims, keys_loaded, query_heads
from . import compressed
from .linear import HC_HEAD, LM_HEAD, block as projections, lm_head_rows
from .mixers import Cached, conv_channels, conv_state_size, state_size, scan_io

def kv_width(block: Block) -> sp.Expr:
    """Elements a KV cache holds per token and layer (and attention reads per key)."""
    if block.attention in ("gqa", "window", "chunk"):
        return s.d_kv + s.h_kv * s.d_v if block.dv else 2 * s.d_kv
    if block.v4:                        # one vector, read as both key and value
        return s.d_h
    if block.form == "naive":
        return s.h_q * (s.d_nope + s.d_rope + s.d_v)
    return s.r_kv + s.d_rope


def forward(block: Block, convention: Convention, logits: Logits, past: sp.Expr, new: sp.Expr,
            batch: sp.Expr = s.B) -> dict[str, sp.Expr]:
    """``operator.kind`` -> elements moved, for every operator of one forward."""
    out: dict[str, sp.Expr] = {}
    for p in projections(block):
        rows = batch * (new + past if p.over_cache else new) * p.uses    # MLA expanded: kv_b_proj over the cache too
        # one routed expert (roofline multiplies by the experts touched); MLA absorbed: the slices of
        # kv_b_proj it multiplies, once per head
        weight = p.fan_in * p.fan_out * (p.uses if not p.weight else 1 if p.instances == s.E else p.instances)
        weight = 0 if p.mixes else weight
        out[f"{p.name}.weight"] = s.L * weight
        out[f"{p.name}.activation"] = s.L * rows * (p.fan_in + p.fan_out)
    if block.attends:
        qk, av = head_dims(block)
        out["attention.activation"] = sp.expand(s.L * batch * new * query_heads(block) * (qk + av))
        keys = keys_loaded(convention, block, past, new)
        read = s.L * batch * kv_width(block)
        out["attention.kv_read"] = sp.Sum(read * keys.function, keys.limits) if isinstance(keys, sp.Sum) else read * keys
        out["attention.kv_write"] = s.L * batch * new * kv_width(block)
    if block.sparse:
        out.update(indexer(convention, block, past, new, batch))
    if block.v4:
        out.update(v4(convention, block, past, new, batch))
    if block.mixer:
        out.update(mixer(convention, block, past, new, batch))
    if logits != "none":          # a chunk that is not the prompt's last runs no LM head
        out[f"{LM_HEAD.name}.weight"] = LM_HEAD.fan_in * LM_HEAD.fan_out
        out[f"{LM_HEAD.name}.activation"] = batch * lm_head_rows(logits, new) * (LM_HEAD.fan_in + LM_HEAD.fan_out)
    return {k: expand(v) for k, v in out.items()}


def indexer(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr, batch: sp.Expr) -> dict[str, sp.Expr]:
    """The lightning indexer's scoring: the index queries (h_I d_I) and head weights (h_I) of the new
    tokens in; the whole index-key cache read (every key is scored, under causal and full alike); the
    new tokens' index keys written."""
    from .attention import refuse_tiled

    refuse_tiled(convention, block)
    return {"indexer.activation": sp.expand(s.L * batch * new * (s.h_I * s.d_I + s.h_I)),
            "indexer.kv_read": sp.expand(s.L * batch * (past + new) * s.d_I),
            "indexer.kv_write": sp.expand(s.L * batch * new * s.d_I)}


def v4(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr, batch: sp.Expr) -> dict[str, sp.Expr]:
    """A DeepSeek-V4 layer's compressed entries written (and a csa indexer's index keys read, its
    queries and head weights in), and the hyper-connection head's matrix and rows."""
    compressed.refuse_tiled(convention, block)
    done = compressed.entries(past + new) - compressed.entries(past)      # entries this forward completes
    out: dict[str, sp.Expr] = {}
    if block.compressed:
        out["compressor.kv_proj.kv_write"] = s.L * batch * done * s.d_h
    if block.attention == "csa":
        out["indexer.activation"] = sp.expand(s.L * batch * new * (s.h_I * s.d_I + s.h_I))
        out["indexer.kv_read"] = s.L * batch * compressed.entries(past + new) * s.d_I
        out["indexer.kv_write"] = s.L * batch * done * s.d_I
    out[f"{HC_HEAD.name}.weight"] = HC_HEAD.fan_in * HC_HEAD.fan_out
    out[f"{HC_HEAD.name}.activation"] = batch * new * (HC_HEAD.fan_in + HC_HEAD.fan_out)
    return out


def mixer(convention: Convention, block: Block, past: sp.Expr, new: sp.Expr, batch: sp.Expr) -> dict[str, sp.Expr]:
    """A mixer's scan and convolution: the state read (when a token is cached) and written
    once per forward, the inputs and outputs of the new tokens."""
    out: dict[str, sp.Expr] = {}
    state, cached = s.L * batch * state_size(block), Cached(past)
    if state != 0:
        out["scan.activation"] = sp.expand(s.L * batch * new * scan_io(block.mixer))
        out["scan.state_read"] = state * cached
        out["scan.state_write"] = sp.expand(state)
    if conv_channels(block.mixer) != 0:
        window = s.L * batch * conv_state_size(convention, block)
        out["conv.activation"] = sp.expand(2 * s.L * batch * new * conv_channels(block.mixer))
        out["conv.kv_read"] = window * cached
        out["conv.kv_write"] = sp.expand(window)
    return out


def build(workload: str, block: Block, convention: Convention = Convention.causal,
          logits: Logits = Logits.last) -> dict[str, sp.Expr]:
    """The element counts of a compiled workload: the forward its registry entry names
    (``traffic``), or for ``steps`` the decode step summed over the N-1 steps after a prefill of S."""
    from .attention import steps_sum
    from .registry import workload as entry

    w = entry(workload)
    if not w.traffic:
        raise ValueError(f"no traffic model for workload {workload!r}")
    logits = w.logits.value if w.logits else logits
    if w.traffic != "steps":
        past, new = (sp.Integer(int(x)) if x.isdigit() else getattr(s, x) for x in w.traffic.split(","))
        return forward(block, convention, logits, past, new)
    step = forward(block, convention, logits, s.T, sp.Integer(1))
    # every step runs over the prompt and more: a state is always there to read
    out = {k: sp.expand(sp.summation(v.subs(s.T, s.S + s.j - 1).replace(Cached, lambda past: 1), (s.j, 1, s.N - 1)))
           for k, v in step.items() if k != "attention.kv_read"}
    if block.attends:
        # keys loaded by one step's one query = the keys it reads (tests/test_roofline.py holds this)
        keys = steps_sum(convention, block, s.S + 1, s.S + s.N - 1)
        out["attention.kv_read"] = s.L * s.B * kv_width(block) * keys
    if block.v4:    # the entries the steps complete telescope; the index keys read are a floor sum
        done = compressed.entries(s.S + s.N - 1) - compressed.entries(s.S)
        out.update({k: s.L * s.B * done * w for k, w in (("compressor.kv_proj.kv_write", s.d_h), ("indexer.kv_write", s.d_I))
                    if k in step})
        if "indexer.kv_read" in step:
            reads = compressed.floor_prefix(s.S + s.N - 1) - compressed.floor_prefix(s.S)
            out["indexer.kv_read"] = sp.expand(s.L * s.B * s.d_I * reads)
    return {k: out[k] for k in step}
