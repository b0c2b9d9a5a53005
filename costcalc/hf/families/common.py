"""What the mappers share: the windowed-layer rules every family picks from, and the mapper
factories of families whose layers are all dense or all MoE."""
from __future__ import annotations

from typing import Callable

from ..reader import Layer, Reader, dense_layers, moe_layers

Mapper = Callable[[Reader], list[Layer]]


def no_windows(r: Reader) -> list[bool]:
    return [False] * r.layer_count()


def every_layer(r: Reader) -> list[bool]:
    """mistral, mixtral, phi3, phimoe, starcoder2: one sliding mask for the whole model when sliding_window is set."""
    return [r.has("sliding_window")] * r.layer_count()


def causal_only(r: Reader) -> None:
    if r.get("use_bidirectional_attention", False) is not False:
        raise r.error("use_bidirectional_attention must be false: a non-causal decoder is not modelled")


def dense(head_dim: str = "derive", kv: str = "derive", ffn: str = "dense",
           windows: Callable[[Reader], list[bool]] = no_windows, causal: bool = False) -> Mapper:
    """A family of dense layers: its ``Reader.heads`` modes, FFN kind and which layers are windowed
    (``causal``: its class has ``use_bidirectional_attention``, which must be false)."""
    def mapper(r: Reader) -> list[Layer]:
        if causal:
            causal_only(r)
        return dense_layers(r, r.heads(head_dim, kv), windows(r), ffn)
    return mapper


def all_moe(kv: str, experts: str = "num_local_experts", k: int | None = None,
             windows: Callable[[Reader], list[bool]] = no_windows) -> Mapper:
    """A family whose every layer is MoE with experts of width intermediate_size."""
    def mapper(r: Reader) -> list[Layer]:
        expert = {"E": r.need(experts), "k": k or r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
        return moe_layers(r, r.heads("derive", kv), windows(r), [True] * r.layer_count(), expert)
    return mapper


def qwen_windows(r: Reader, below: bool) -> list[bool]:
    """Qwen2/3 (``below`` False): layers i >= max_window_layers; Qwen2-MoE (``below``): even layers
    i < max_window_layers -- when use_sliding_window; layer_types decides where written."""
    on = r.flag("use_sliding_window", False)
    first = r.count("max_window_layers", 28)
    n = r.layer_count()
    derived = [on and ((i % 2 == 0 and i < first) if below else i >= first) for i in range(n)]
    local = r.windowed(derived, ("use_sliding_window", "max_window_layers"))
    if any(local) and not on:
        raise r.error("'layer_types' windows layers but use_sliding_window is not true (transformers then has no window)")
    return local


def divisible(r: Reader, width: str, heads: str) -> None:
    d, h = r.need(width), r.need(heads)
    if d % h:
        raise r.error(f"{width} ({d}) must be divisible by {heads} ({h}) (transformers refuses it)")


def head_dim_number(r: Reader) -> None:
    """A head_dim key written null: 5.23 reads it as is, and its attention cannot be built."""
    if "head_dim" in r.config and r.config["head_dim"] is None:
        raise r.error("field 'head_dim' must be a number (5.23 reads it as is: null cannot build)")


def stated_window(r: Reader, windowed: bool = True) -> None:
    """Where a layer is windowed the config must state ``sliding_window`` (null for none): the
    classes' default of 4096 is not assumed."""
    if windowed and "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (null for no window; the class default is 4096)")


def inner_width(r: Reader, width: str = "n_embd") -> int:
    """GPT-2-style MLP width: ``n_inner``, or 4 x the hidden width where it is null or absent."""
    return r.need("n_inner") if r.has("n_inner") else 4 * r.need(width)


def hunyuan_keys(r: Reader, head_dim: int) -> None:
    """Tencent's remote-code keys both Hunyuan families carry, held to what 5.23 builds: no
    cross-layer K/V sharing (use_cla with a share factor above 1), attention_head_dim = head_dim."""
    if r.flag("use_cla", False) and r.count("cla_share_factor", 1) != 1:
        raise r.error("use_cla shares keys and values across layers, which transformers 5.23 does not run "
                      "(it builds k_proj and v_proj on every layer): set use_cla false")
    r.same("attention_head_dim", head_dim, "it must equal head_dim (transformers 5.23 reads head_dim)")
