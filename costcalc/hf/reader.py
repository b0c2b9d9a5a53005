"""Reading one config: values with errors that name the config and the field, and layer kinds.

What a missing key means follows transformers 5.23: where its class derives the value from
others (``head_dim`` = hidden_size // heads, ``num_key_value_heads`` = heads) or defaults a
switch or a layer placement (``use_sliding_window``, ``first_k_dense_replace``, ``layer_types``,
``tie_word_embeddings`` ...), costcalc does the same. A size whose class default is only the
class's example model (``hidden_size``, expert counts, a fixed ``head_dim``, a window ``W``,
a LoRA rank ...) must be stated: costcalc does not cost the example model by accident.
"""
from __future__ import annotations

from typing import Any, Optional

from ..errors import CostcalcError, quote

SLIDING, FULL, CHUNKED = "sliding_attention", "full_attention", "chunked_attention"
Layer = dict   # one layer: {"arch": ..., sizes...}


class Reader:
    """Field access for one config of one family (aliases folded into their targets, and read as
    them: GPT-J's ``hidden_size`` is its ``n_embd`` whichever spelling the config uses)."""

    def __init__(self, config: dict, family: str, where: str, aliases: dict[str, str]) -> None:
        """``where``: the config as errors name it ("config 'path/config.json'")."""
        self.config, self.family, self.where = dict(config), family, where
        for alias, target in aliases.items():
            if self.has(alias):
                if self.has(target) and self.config[target] != self.config[alias]:
                    raise self.error(f"fields {alias!r} and {target!r} (the same field) disagree: "
                                     f"{quote(self.config[alias])} vs {quote(self.config[target])}")
                self.config[target] = self.config[alias]
            self.config.pop(alias, None)
            if target in self.config:
                self.config[alias] = self.config[target]

    def error(self, message: str) -> CostcalcError:
        return CostcalcError(f"{self.where}: {self.family}: {message}")

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def need(self, key: str) -> int:
        """A size the config must state: a positive integer."""
        if not self.has(key):
            raise CostcalcError(f"{self.where}: {self.family} needs field {quote(key)}")
        return self.int(key)

    def int(self, key: str, minimum: int = 1) -> int:
        """An integer of ``minimum`` and up, at most ``spec.MAX_SIZE`` (a size, count or index)."""
        from ..spec import MAX_SIZE

        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.error(f"field {quote(key)} must be {kind}, got {quote(value)}")
        if value > MAX_SIZE:
            raise self.error(f"field {quote(key)} is too large (at most {MAX_SIZE:,}), got {quote(value)}")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value, or the class's default where the key is absent or null."""
        return self.config[key] if self.has(key) else default

    def count(self, key: str, default: int, minimum: int = 0) -> int:
        """A layer index, step or count with the class's default (``minimum`` and up)."""
        return self.int(key, minimum) if self.has(key) else default

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(f"field {quote(key)} must be true or false, got {quote(value)}")
        return value

    def indices(self, key: str, default: list[int]) -> list[int]:
        value = self.get(key, default)
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise self.error(f"field {quote(key)} must be a list of integers, got {quote(value)}")
        return value

    def same(self, key: str, expected: Any, why: str) -> None:
        """A key transformers does not read must not say something else than what it does."""
        if self.has(key) and self.config[key] != expected:
            raise self.error(f"field {quote(key)} is {quote(self.config[key])} but {why}")

    def layer_count(self) -> int:
        """num_hidden_layers, at most ``spec.MAX_LAYERS``: checked before any per-layer work."""
        from ..spec import MAX_LAYERS

        n = self.config.get("num_hidden_layers")
        if isinstance(n, int) and not isinstance(n, bool) and n > MAX_LAYERS:
            raise self.error(f"field 'num_hidden_layers' is too large (at most {MAX_LAYERS:,}), got {quote(n)}")
        return self.need("num_hidden_layers")

    def heads(self, head_dim: str = "derive", kv: str = "derive") -> dict[str, int]:
        """h_q, h_kv, d_h as the family's code reads them. ``head_dim``: ``derive`` (absent or
        null: hidden_size // heads), ``stated`` (the class default is a fixed number, so the key
        must be there; null: hidden_size // heads), ``require`` (must be a number), ``mha`` (never
        read: d // h, and h_kv = h_q). ``kv``: ``derive`` (absent or null: h_q) or ``stated`` (the
        class default is a fixed number: the key must be there; null: h_q)."""
        h_q = self.need("num_attention_heads")
        if head_dim == "mha":
            return {"h_q": h_q, "h_kv": h_q, "d_h": self.need("hidden_size") // h_q}
        for key, mode in (("num_key_value_heads", kv), ("head_dim", head_dim)):
            if mode in ("stated", "require") and key not in self.config:
                raise self.error(f"needs field {quote(key)} (its class default is a fixed number, "
                                 f"not derived from the other sizes)")
        h_kv = self.int("num_key_value_heads") if self.has("num_key_value_heads") else h_q
        if self.has("head_dim"):
            d_h = self.int("head_dim")
        elif head_dim == "require":
            raise self.error("needs field 'head_dim' (a number)")
        else:
            d_h = self.need("hidden_size") // h_q
        return {"h_q": h_q, "h_kv": h_kv, "d_h": d_h}

    def types(self, allowed: tuple[str, ...] = (SLIDING, FULL)) -> Optional[list[str]]:
        """``layer_types`` as written (None when absent): one allowed type per layer."""
        kinds = self.get("layer_types")
        if kinds is None:
            return None
        if not isinstance(kinds, list) or len(kinds) != self.layer_count():
            raise self.error("'layer_types' must list one type per layer (num_hidden_layers)")
        kinds = [FULL if k == "attention" else k for k in kinds]      # transformers' legacy spelling
        for kind in kinds:
            if kind not in allowed:
                raise self.error(f"layer type {quote(kind)} is not one this family runs (expected {', '.join(allowed)})")
        return kinds

    def windowed(self, derived: list[bool], legacy: tuple[str, ...], kind: str = SLIDING) -> list[bool]:
        """Which layers are local (windowed or chunked): ``layer_types`` where the config writes it,
        else ``derived`` from the older fields. A config that carries both must agree."""
        kinds = self.types((kind, FULL))
        if kinds is None:
            return derived
        local = [k == kind for k in kinds]
        carried = [k for k in legacy if self.has(k)]
        if carried and local != derived:
            layer = next(i for i, (a, b) in enumerate(zip(local, derived)) if a != b)
            raise self.error(f"'layer_types' and {', '.join(map(repr, carried))} disagree (layer {layer}: "
                             f"{kinds[layer]} vs {'local' if derived[layer] else 'full'})")
        return local


def attention(r: Reader, local: bool, heads: dict[str, int], kind: str = "window") -> tuple[str, dict]:
    """A layer's attention kind and sizes: ``gqa``, or ``window`` (W) / ``chunk`` (W_c) when local."""
    if not local:
        return "gqa", dict(heads)
    if kind == "chunk":
        return "chunk", {**heads, "W_c": r.need("attention_chunk_size")}
    return "window", {**heads, "W": r.need("sliding_window")}


def dense_layers(r: Reader, heads: dict[str, int], local: list[bool], ffn: str = "dense",
                 width: str = "intermediate_size", kind: str = "window") -> list[Layer]:
    m = r.need(width)
    out = []
    for windowed in local:
        attn, sizes = attention(r, windowed, heads, kind)
        out.append({"arch": f"{attn}.{ffn}", **sizes, "m": m})
    return out


def moe_layers(r: Reader, heads: dict[str, int], local: list[bool], is_moe: list[bool], expert: dict[str, int],
               shared: Optional[dict[str, int]] = None, gate: bool = False, dense_width: str = "intermediate_size",
               kind: str = "window") -> list[Layer]:
    """MoE layers where ``is_moe``, dense SwiGLU layers of width ``dense_width`` elsewhere."""
    out = []
    for windowed, moe in zip(local, is_moe):
        attn, sizes = attention(r, windowed, heads, kind)
        if moe:
            ffn = "moe" + ("_shared" if shared else "") + ("_gate" if gate else "")
            out.append({"arch": f"{attn}.{ffn}", **sizes, **expert, **(shared or {})})
        else:
            out.append({"arch": f"{attn}.dense", **sizes, "m": r.need(dense_width)})
    return out
