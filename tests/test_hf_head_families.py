"""Families whose attention needs the GQA head features (costcalc/hf/families/heads.py): what the import
reads from the published file, and the published keys transformers 5.23 does not read held to what it
builds. Parameters and prefill FLOPs against the meta model are in tests/test_hf_transformers.py (a
small config; the real file at its real size under -m slow)."""
import json
from pathlib import Path

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def mimo(**changes) -> dict:
    return {**json.loads((CONFIGS / "mimo-v2-flash.json").read_text()), **changes}


def groups(config: dict) -> list[tuple]:
    preset = hf.to_preset(config, "x")
    layers = preset.get("layers") or [{"count": preset["L"], "arch": preset["arch"]}]
    return [(g["count"], g["arch"], g.get("h_kv", preset.get("h_kv")), g.get("W", preset.get("W"))) for g in layers]


def test_mimo_v2_flash_reads_its_published_layers():
    """Layer 0 and every 6th full (9 of 48) with 4 KV heads, the others sliding with 8; layer 0 dense.
    The window is sliding_window_size + 1 (5.23's __post_init__), whatever sliding_window says."""
    assert groups(mimo()) == [(1, "gqa-dv.dense", 4, None), (39, "window-dv.moe", 8, 129), (8, "gqa-dv.moe", 4, None)]
    preset = hf.to_preset(mimo(), "x")
    assert (preset["d_h"], preset["d_v"], preset["h_q"]) == (192, 128, 64)
    assert groups(mimo(sliding_window_size=None, sliding_window=64))[1][3] == 64


def test_mimo_v2_flash_with_equal_head_dims_is_plain_gqa():
    config = mimo(v_head_dim=192, swa_v_head_dim=192)
    assert [g[1] for g in groups(config)] == ["gqa.dense", "window.moe", "gqa.moe"]


@pytest.mark.parametrize("change, told", [
    ({"hybrid_layer_pattern": [0] * 48}, "'hybrid_layer_pattern' says layer 1 is full but transformers 5.23 builds it sliding"),
    ({"moe_layer_freq": [1] * 48}, "'moe_layer_freq' says layer 0 is MoE but transformers 5.23 builds it dense"),
    ({"swa_num_key_value_heads": 4}, "'swa_num_key_value_heads' is 4 but transformers 5.23 does not read it"),
    ({"swa_v_head_dim": 192}, "'swa_v_head_dim' is 192"),
    ({"n_shared_experts": 1}, "builds no shared expert"),
    ({"hybrid_layer_pattern": [0, 1]}, "must list 0 or 1 for each layer"),
    ({"v_head_dim": None}, "needs field 'v_head_dim'"),
    ({"layer_types": ["full_attention"] * 48, "hybrid_layer_pattern": None}, None),
])
def test_mimo_v2_flash_keys_5_23_does_not_read_must_say_what_it_builds(change, told):
    if told is None:         # layer_types decides: every layer full, no window needed
        assert groups(mimo(**change)) == [(1, "gqa-dv.dense", 4, None), (47, "gqa-dv.moe", 4, None)]
        return
    with pytest.raises(CostcalcError, match=told.replace("(", r"\(").replace(")", r"\)")):
        hf.to_preset(mimo(**change), "x")
