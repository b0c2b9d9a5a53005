"""Gemma 4 (``gemma4``, its ``text_config`` read as ``gemma4_text``) held against transformers 5.23's
``modeling_gemma4.py`` (tests/test_hf_transformers.py also holds its tables, the small MoE config's
parameters and prefill FLOPs, the real configs rewritten by transformers, and -- slow -- both real
configs at their real size).

1. The published configs map to sliding and full layer groups with their own head widths and KV
   heads, values from the keys on the full layers (``-keqv``), experts beside the MLP (``moe_shared``).
2. On small configs: the matrices transformers builds on meta and the FLOPs FlopCounterMode counts
   for a prefill with eager attention equal costcalc's, for the MoE and the dense layout, with and
   without attention_k_eq_v, from global_head_dim or from a written per_layer_config; the
   projections transformers builds are the ones costcalc names (no v_proj on the full layers).
3. What 5.23 runs that costcalc cannot express is refused in one line naming it.
"""
import json

import pytest

from costcalc import calc, hf
from costcalc.spec import from_dict
from hf_rules import CONFIGS, refused

SLIDING, FULL = "sliding_attention", "full_attention"
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128,
            max_position_embeddings=256, head_dim=16, global_head_dim=24, sliding_window=8,
            hidden_size_per_layer_input=0)
MOE = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32)
SMALL = {
    "moe-keqv": dict(BASE, **MOE, num_hidden_layers=5, attention_k_eq_v=True, num_global_key_value_heads=1,
                     layer_types=[SLIDING, FULL, SLIDING, SLIDING, FULL]),
    # without attention_k_eq_v, num_global_key_value_heads is not read: full layers keep num_key_value_heads
    "dense": dict(BASE, num_hidden_layers=4, num_global_key_value_heads=1,
                  layer_types=[SLIDING, SLIDING, FULL, FULL]),
    # the class's own pattern (every sixth layer full), and its forcing of the last layer to full
    "dense-pattern": dict(BASE, num_hidden_layers=8, attention_k_eq_v=True),
}


def groups(config: dict) -> list[tuple[int, str, dict]]:
    """(count, arch, sizes but d and V) of each layer group (a small config is a gemma4_text one)."""
    spec = from_dict(hf.to_preset({"model_type": "gemma4_text", **config}, "x"), "x")
    return [(g.count, g.arch, {k: v for k, v in g.sizes.items() if k not in ("d", "V")}) for g in spec.groups]


def text(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_gemma_4_26b_a4b_maps_to_sliding_and_full_moe_layers():
    moe = dict(E=128, k=8, m_e=704, E_s=1, m_s=2112)
    assert groups(text("gemma-4-26b-a4b")) == [
        (25, "window.moe_shared", dict(h_q=16, h_kv=8, d_h=256, W=1024, **moe)),
        (5, "gqa-keqv.moe_shared", dict(h_q=16, h_kv=2, d_h=512, **moe))]
    preset = hf.to_preset(text("gemma-4-26b-a4b"), "x")
    assert (preset["d"], preset["V"], preset["tied_embeddings"]) == (2816, 262144, True)


def test_gemma_4_31b_maps_to_dense_layers():
    assert groups(text("gemma-4-31b")) == [(50, "window.dense", dict(h_q=32, h_kv=16, d_h=256, W=1024, m=21504)),
                                           (10, "gqa-keqv.dense", dict(h_q=32, h_kv=4, d_h=512, m=21504))]


def test_small_configs_map_layer_by_layer():
    moe = dict(E=4, k=2, m_e=32, E_s=1, m_s=96)
    # the last layer is forced full (5.23), so layer_types' last sliding entry never holds
    assert groups(SMALL["moe-keqv"]) == [(3, "window.moe_shared", dict(h_q=4, h_kv=2, d_h=16, W=8, **moe)),
                                         (2, "gqa-keqv.moe_shared", dict(h_q=4, h_kv=1, d_h=24, **moe))]
    assert groups(SMALL["dense"]) == [(2, "window.dense", dict(h_q=4, h_kv=2, d_h=16, W=8, m=96)),
                                      (2, "gqa.dense", dict(h_q=4, h_kv=2, d_h=24, m=96))]
    assert [(c, a) for c, a, _ in groups(SMALL["dense-pattern"])] == [(6, "window.dense"), (2, "gqa-keqv.dense")]
    forced = dict(SMALL["moe-keqv"], layer_types=[SLIDING] * 5)
    assert [(c, a) for c, a, _ in groups(forced)] == [(4, "window.moe_shared"), (1, "gqa-keqv.moe_shared")]


def test_a_written_per_layer_config_wins_as_in_transformers():
    """5.23 pops global_head_dim and num_global_key_value_heads only where no per_layer_config is given."""
    written = dict(SMALL["moe-keqv"], per_layer_config={"1": {"head_dim": 32}, "4": {"head_dim": 32,
                                                                                    "num_key_value_heads": 4}})
    assert [(c, a, s["d_h"], s["h_kv"]) for c, a, s in groups(written)] == [
        (3, "window.moe_shared", 16, 2), (1, "gqa-keqv.moe_shared", 32, 2), (1, "gqa-keqv.moe_shared", 32, 4)]


def meta(config: dict, seq: int = 24):
    """(matrix parameters, prefill FLOPs, parameter names) of the causal LM transformers builds on meta."""
    pytest.importorskip("transformers")
    from hf_models import build, matrix_params, prefill_flops

    model, family = build({"model_type": "gemma4_text", **config}, experts="num_experts" in config)
    names = [n for n, p in model.named_parameters() if p.ndim >= 2]
    return matrix_params(model, family), prefill_flops(model, seq), names


@pytest.mark.parametrize("name", sorted(SMALL))
def test_parameters_and_prefill_flops_equal_what_transformers_builds_and_counts(name):
    config = {"model_type": "gemma4_text", **SMALL[name]}
    spec = from_dict(hf.to_preset(config, "small"), "small")
    params, flops, names = meta(SMALL[name])
    assert calc.parameters(spec)["total_params"] == params
    assert calc.prefill(spec, 24, 1, "full", logits="all")["total_flops"] == flops
    full = [i for i, g in enumerate(spec.groups) if g.block.attention == "gqa"]
    layers_without_v = {n.split(".")[2] for n in names if n.endswith("k_proj.weight")} - \
                       {n.split(".")[2] for n in names if n.endswith("v_proj.weight")}
    assert bool(layers_without_v) == any(spec.groups[i].block.k_eq_v for i in full)


def test_the_per_layer_config_transformers_writes_reads_the_same():
    pytest.importorskip("transformers")
    from hf_models import rewrite

    for config in SMALL.values():
        original = {"model_type": "gemma4_text", **config}
        written = rewrite(original)
        assert "global_head_dim" not in written and written.get("per_layer_config")
        assert groups(written) == groups(original)


def test_what_cannot_be_expressed_is_refused_in_one_line():
    real = text("gemma-4-26b-a4b")
    inner = real["text_config"]

    def variant(**changes):
        return {**real, "text_config": {k: v for k, v in {**inner, **changes}.items() if v is not ...}}

    # Gemma 4 E2B / E4B: per-layer embeddings (the class default is 256) and KV sharing across layers
    refused(variant(hidden_size_per_layer_input=256), "hidden_size_per_layer_input is 256", "per-layer embeddings")
    refused(variant(hidden_size_per_layer_input=...), "(the class default)", "does not model")
    refused(variant(num_kv_shared_layers=20), "num_kv_shared_layers is 20", "does not model")
    refused(variant(use_bidirectional_attention="all"), "non-causal")
    refused(variant(global_head_dim=...), "needs field 'global_head_dim'")
    refused(variant(per_layer_config={"5": {"intermediate_size": 4096}}), "'intermediate_size'", "only head_dim")
    refused(variant(per_layer_config={"30": {"head_dim": 512}}), "not a layer index below 30")
    refused(variant(expert_intermediate_size=512), "expert_intermediate_size")
    refused(variant(sliding_window=...), "needs field 'sliding_window'")
    refused(variant(head_dim=...), "head_dim")
    refused(variant(num_global_key_value_heads=3), "not a multiple of its key/value heads")
    # the vision and audio towers are the wrapper's, never read
    assert groups({**real, "vision_config": {"model_type": "gemma4_vision", "hidden_size": 1152},
                   "audio_config": {"hidden_size": 1024}}) == groups(real)
