"""The config import's rules for the families added after transformers 5's first list (GPT-J to
Hunyuan-MoE): which fields decide the layers, and what is refused where transformers 5.23 would
build something else than the config says. Without transformers (tests/test_hf_transformers.py
holds the same reading against transformers itself)."""
import json

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError
from hf_rules import BASE, CONFIGS, kinds


def test_non_gated_mlp_families_and_multi_head_gpt_neox():
    pythia = json.loads((CONFIGS / "pythia-6.9b.json").read_text())
    preset = hf.to_preset({**pythia, "num_key_value_heads": 8, "head_dim": 64}, "x")   # neither is read
    assert (preset["arch"], preset["h_kv"], preset["d_h"]) == ("gqa.mlp", 32, 128)
    assert kinds(json.loads((CONFIGS / "starcoder2-7b.json").read_text())) == [(32, "window.mlp")]
    assert kinds(json.loads((CONFIGS / "apertus-8b-2509.json").read_text())) == [(32, "gqa.mlp")]


def test_gptj_reads_either_spelling_and_defaults_its_mlp_to_four_times_the_width():
    gptj = json.loads((CONFIGS / "gpt-j-6b.json").read_text())
    preset = hf.to_preset(gptj, "x")
    assert (preset["arch"], preset["L"], preset["h_q"], preset["h_kv"], preset["d_h"], preset["m"]) == \
           ("gqa.mlp", 28, 16, 16, 256, 4 * 4096)
    renamed = {k: v for k, v in gptj.items() if k not in ("n_embd", "n_head", "n_layer", "n_positions")}
    renamed.update(hidden_size=4096, num_attention_heads=16, num_hidden_layers=28, max_position_embeddings=2048)
    assert hf.to_preset(renamed, "x") == preset                 # attribute_map spellings read as the fields
    assert hf.to_preset({**gptj, "n_inner": 8192}, "x")["m"] == 8192
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**gptj, "hidden_size": 2048}, "x")
    with pytest.raises(CostcalcError, match="divisible"):
        hf.to_preset({**gptj, "n_head": 12}, "x")


def test_phi_stablelm_and_nemotron_heads():
    phi = json.loads((CONFIGS / "phi-2.json").read_text())
    assert kinds(phi) == [(32, "gqa.mlp")]
    assert hf.to_preset({**phi, "head_dim": 64}, "x")["d_h"] == 64         # the code reads a head_dim key
    stablelm = json.loads((CONFIGS / "stablelm-2-1_6b.json").read_text())
    assert kinds(stablelm) == [(24, "gqa.dense")]
    with pytest.raises(CostcalcError, match="needs field 'num_key_value_heads'"):
        hf.to_preset({k: v for k, v in stablelm.items() if k != "num_key_value_heads"}, "x")   # class default 32
    with pytest.raises(CostcalcError, match="'head_dim' .stablelm. is not understood"):
        hf.to_preset({**stablelm, "head_dim": 64}, "x")
    minitron = json.loads((CONFIGS / "minitron-8b-base.json").read_text())
    preset = hf.to_preset(minitron, "x")
    assert (preset["arch"], preset["h_q"] * preset["d_h"], preset["h_kv"]) == ("gqa.mlp", 6144, 8)
    assert hf.to_preset({**minitron, "head_dim": None}, "x")["d_h"] == 4096 // 48
    with pytest.raises(CostcalcError, match="needs field 'num_key_value_heads'"):
        hf.to_preset({**minitron, "num_key_value_heads": None}, "x")      # transformers cannot run null


def test_interleaved_and_dense_first_moe_layouts():
    ernie = json.loads((CONFIGS / "ernie-4.5-21b-a3b-pt.json").read_text())
    assert kinds(ernie) == [(1, "gqa.dense"), (27, "gqa.moe_shared")]
    assert kinds({**ernie, "moe_layer_interval": 2}) == [(14, "gqa.dense"), (14, "gqa.moe_shared")]
    assert kinds({**ernie, "moe_num_shared_experts": 0}) == [(1, "gqa.dense"), (27, "gqa.moe")]
    glm = json.loads((CONFIGS / "glm-4.5-air.json").read_text())
    preset = hf.to_preset(glm, "x")
    assert [(g["count"], g["arch"]) for g in preset["layers"]] == [(1, "gqa.dense"), (45, "gqa.moe_shared")]
    assert preset["layers"][0]["m"] == glm["intermediate_size"] != glm["moe_intermediate_size"] == preset["layers"][1]["m_e"]


def test_ministral_windows_follow_layer_types_and_need_a_head_dim_and_a_window_key():
    full, local = "full_attention", "sliding_attention"
    config = dict(BASE, model_type="ministral", num_hidden_layers=4, head_dim=16, sliding_window=8)
    assert kinds(config) == [(4, "window.dense")]                       # absent layer_types: every layer
    assert kinds({**config, "layer_types": [full, local, local, local]}) == [(1, "gqa.dense"), (3, "window.dense")]
    assert kinds({**config, "sliding_window": None}) == [(4, "gqa.dense")]
    with pytest.raises(CostcalcError, match="needs field 'head_dim'"):
        hf.to_preset({**config, "head_dim": None}, "x")                 # transformers cannot build it
    with pytest.raises(CostcalcError, match="needs field 'sliding_window'"):
        hf.to_preset({k: v for k, v in config.items() if k != "sliding_window"}, "x")


def test_helium_heads_times_head_dim_must_be_hidden_and_ernie4_5_ties_by_default():
    helium = dict(BASE, model_type="helium", num_hidden_layers=2, head_dim=16)
    assert kinds(helium) == [(2, "gqa.dense")]
    with pytest.raises(CostcalcError, match="o_proj is hidden_size x hidden_size"):
        hf.to_preset({**helium, "head_dim": 24}, "x")
    ernie = dict(BASE, model_type="ernie4_5", num_hidden_layers=2, head_dim=None)
    preset = hf.to_preset(ernie, "x")
    assert preset["tied_embeddings"] is True and preset["d_h"] == 16     # null head_dim: hidden // heads
    with pytest.raises(CostcalcError, match="needs field 'head_dim'"):
        hf.to_preset({k: v for k, v in ernie.items() if k != "head_dim"}, "x")   # the class's 128 must be stated


def test_gpt_bigcode_multi_query_and_its_default_width():
    santacoder = json.loads((CONFIGS / "gpt_bigcode-santacoder.json").read_text())
    preset = hf.to_preset(santacoder, "x")
    assert (preset["arch"], preset["L"], preset["h_q"], preset["h_kv"], preset["d_h"], preset["m"]) == \
           ("gqa.mlp", 24, 16, 1, 128, 8192)
    assert preset["tied_embeddings"] is True                              # the class default
    assert hf.to_preset({**santacoder, "multi_query": False}, "x")["h_kv"] == 16
    assert hf.to_preset({**santacoder, "n_inner": None}, "x")["m"] == 4 * 2048
    with pytest.raises(CostcalcError, match="'num_key_value_heads' is 16 but multi_query is true"):
        hf.to_preset({**santacoder, "num_key_value_heads": 16}, "x")
    with pytest.raises(CostcalcError, match="add_cross_attention"):
        hf.to_preset({**santacoder, "add_cross_attention": True}, "x")


def test_opt_refuses_a_projected_embedding():
    opt = json.loads((CONFIGS / "opt-6.7b.json").read_text())
    assert kinds(opt) == [(32, "gqa.mlp")]
    assert hf.to_preset({**opt, "word_embed_proj_dim": None}, "x") == hf.to_preset(opt, "x")
    with pytest.raises(CostcalcError, match="word_embed_proj_dim .512. != hidden_size .4096.: transformers"):
        hf.to_preset({**opt, "word_embed_proj_dim": 512}, "x")        # opt-350m's project_in / project_out


def test_bloom_and_mpt_build_four_times_the_width_whatever_they_say():
    bloom = json.loads((CONFIGS / "bloom-7b1.json").read_text())
    preset = hf.to_preset(bloom, "x")
    assert (preset["d"], preset["h_q"], preset["h_kv"], preset["m"]) == (4096, 32, 32, 4 * 4096)
    renamed = {k: v for k, v in bloom.items() if k not in ("n_embed", "num_attention_heads")}
    assert hf.to_preset({**renamed, "hidden_size": 4096, "n_head": 32}, "x") == preset    # either spelling
    with pytest.raises(CostcalcError, match="'n_inner' is 8192"):
        hf.to_preset({**bloom, "n_inner": 8192}, "x")
    mpt = json.loads((CONFIGS / "mpt-7b.json").read_text())
    assert kinds(mpt) == [(32, "gqa.mlp")] and hf.to_preset(mpt, "x")["m"] == 4 * 4096
    with pytest.raises(CostcalcError, match="'expansion_ratio' is 8"):
        hf.to_preset({**mpt, "expansion_ratio": 8}, "x")
    with pytest.raises(CostcalcError, match="attn_type is 'multiquery_attention'"):
        hf.to_preset({**mpt, "attn_config": {**mpt["attn_config"], "attn_type": "multiquery_attention"}}, "x")
    with pytest.raises(CostcalcError, match="'attn_config.kv_n_heads' is not understood"):
        hf.to_preset({**mpt, "attn_config": {**mpt["attn_config"], "kv_n_heads": 8}}, "x")


def test_cohere2_windows_follow_its_pattern_and_its_legacy_keys_must_say_what_runs():
    full, local = "full_attention", "sliding_attention"
    config = dict(BASE, model_type="cohere2", num_hidden_layers=4, sliding_window=8)
    assert kinds(config) == [(3, "window.dense"), (1, "gqa.dense")]            # pattern 4: every 4th global
    assert kinds({**config, "sliding_window_pattern": 2, "layer_types": [local, full, local, full]}) == \
        [(2, "window.dense"), (2, "gqa.dense")]
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**config, "sliding_window_pattern": 4, "layer_types": [local, full, local, full]}, "x")
    for key, value in (("order_of_interleaved_layers", "global_attn_first"), ("use_gated_activation", False),
                       ("use_embedding_sharing", False)):
        with pytest.raises(CostcalcError, match=key):
            hf.to_preset({**config, key: value}, "x")
    with pytest.raises(CostcalcError, match="needs field 'sliding_window'"):
        hf.to_preset({k: v for k, v in config.items() if k != "sliding_window"}, "x")
    with pytest.raises(CostcalcError, match="'head_dim' must be a number"):
        hf.to_preset({**config, "head_dim": None}, "x")


def test_hunyuan_needs_a_head_dim_and_no_cross_layer_attention_and_arcee_vaultgemma_need_whole_heads():
    hunyuan = dict(BASE, model_type="hunyuan_v1_dense", num_hidden_layers=2, head_dim=16)
    assert kinds(hunyuan) == [(2, "gqa.dense")]
    with pytest.raises(CostcalcError, match="needs field 'head_dim'"):
        hf.to_preset({**hunyuan, "head_dim": None}, "x")
    with pytest.raises(CostcalcError, match="use_cla"):
        hf.to_preset({**hunyuan, "use_cla": True, "cla_share_factor": 2}, "x")
    arcee = dict(BASE, model_type="arcee", num_hidden_layers=2)
    assert kinds(arcee) == [(2, "gqa.mlp")]
    with pytest.raises(CostcalcError, match="divisible"):
        hf.to_preset({**arcee, "hidden_size": 66}, "x")
    vault = dict(BASE, model_type="vaultgemma", num_hidden_layers=4, head_dim=16, sliding_window=8)
    assert kinds(vault) == [(2, "window.dense"), (2, "gqa.dense")]                 # absent layer_types: the even ones
    assert hf.to_preset(vault, "x")["tied_embeddings"] is True
    with pytest.raises(CostcalcError, match="needs field 'num_key_value_heads'"):
        hf.to_preset({k: v for k, v in vault.items() if k != "num_key_value_heads"}, "x")


def test_dots1_windows_above_max_window_layers_and_moe_from_first_k_dense_replace():
    config = dict(BASE, model_type="dots1", num_hidden_layers=4, moe_intermediate_size=8, n_routed_experts=4,
                  n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1, num_key_value_heads=2)
    assert kinds(config) == [(1, "gqa.dense"), (3, "gqa.moe_shared")]   # 62 > 4 layers: no window
    assert kinds({**config, "sliding_window": 8, "max_window_layers": 2}) == \
        [(1, "gqa.dense"), (1, "gqa.moe_shared"), (2, "window.moe_shared")]
    assert kinds({**config, "sliding_window": None, "max_window_layers": 2}) == [(1, "gqa.dense"), (3, "gqa.moe_shared")]
    with pytest.raises(CostcalcError, match="needs field 'sliding_window'"):
        hf.to_preset({**config, "max_window_layers": 2}, "x")           # the class's 4096 must be stated
    with pytest.raises(CostcalcError, match="'moe_layer_freq' is 2"):
        hf.to_preset({**config, "moe_layer_freq": 2}, "x")
    windowed = {**config, "sliding_window": 8, "max_window_layers": 2}
    assert kinds({**windowed, "use_sliding_window": True}) == kinds(windowed)    # unread, and it agrees
    with pytest.raises(CostcalcError, match="use_sliding_window"):
        hf.to_preset({**windowed, "use_sliding_window": False}, "x")          # it says no window where 5.23 windows


def test_hunyuan_published_keys_must_say_what_transformers_builds():
    config = dict(BASE, model_type="hunyuan_v1_moe", num_hidden_layers=2, head_dim=16, num_experts=4,
                  moe_topk=[2, 1], num_shared_expert=[1, 1], use_mixed_mlp_moe=True, use_cla=False)
    assert kinds(config) == [(1, "gqa.moe_shared"), (1, "gqa.moe_shared")]   # k = 2, then 1
    for change, message in (({"use_cla": True, "cla_share_factor": 2}, "shares keys and values across layers"),
                            ({"use_mixed_mlp_moe": False}, "shared MLP"), ({"num_shared_expert": [1, 2]}, "one shared MLP"),
                            ({"num_experts": [4, 4]}, "one integer"), ({"moe_intermediate_size": 8}, "intermediate_size wide"),
                            ({"head_dim": None}, r"needs field 'head_dim' \(a number\)"),
                            ({"attention_head_dim": 8}, "must equal head_dim")):
        with pytest.raises(CostcalcError, match=message):
            hf.to_preset({**config, **change}, "x")
    # the remote-code keys read alike in both Hunyuan families: sharing with factor 1 is no sharing
    dense = dict(BASE, model_type="hunyuan_v1_dense", num_hidden_layers=2, head_dim=16)
    for family in (config, dense):
        assert kinds({**family, "use_cla": True, "cla_share_factor": 1, "org_vocab_size": 128}) == kinds(family)
        with pytest.raises(CostcalcError, match="across layers"):
            hf.to_preset({**family, "use_cla": True, "cla_share_factor": 2}, "x")
