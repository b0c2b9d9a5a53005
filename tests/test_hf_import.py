"""The config import's semantics, family by family, without transformers (tests/test_hf_transformers.py
holds the same reading against transformers itself when it is installed)."""
import json
import re
from pathlib import Path

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError
from costcalc.hf.fields import COMMON, SHARED

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128)


def kinds(config: dict) -> list[tuple[int, str]]:
    preset = hf.to_preset(config, "x")
    if "layers" not in preset:
        return [(preset["L"], preset["arch"])]
    return [(g["count"], g["arch"]) for g in preset["layers"]]


def test_every_table_row_has_a_role_and_a_reason():
    for family, table in hf.TABLES.items():
        for key, row in table.known().items():
            assert row.role in ("used", "ignored") and row.reason, (family, key)
    assert "model_type" in COMMON and "hidden_size" in SHARED


@pytest.mark.parametrize("family, kind", sorted(hf.OUT_OF_REACH.items()))
def test_families_out_of_reach_are_one_line_errors_naming_the_block_kind(family, kind):
    with pytest.raises(CostcalcError, match=re.escape(kind)) as err:
        hf.to_preset({"model_type": family, **BASE}, "x")
    assert "not supported" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    ({}, "config: missing field 'model_type' (the model family; supported: llama, "),
    ({"model_type": None}, "config: missing field 'model_type' (the model family; supported: llama, "),
    ({"model_type": 3}, "config: field 'model_type' must be a string (the model family), got 3"),
    ({"model_type": ["llama"]}, "field 'model_type' must be a string (the model family), got ['llama']"),
    ({"model_type": {"name": "llama"}}, "field 'model_type' must be a string"),
])
def test_a_missing_or_bad_model_type_is_one_line_naming_the_field(change, message):
    with pytest.raises(CostcalcError) as err:
        hf.to_preset({"num_hidden_layers": 2, **BASE, **change}, "x")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_llama4_no_rope_layers_must_be_a_list():
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e.json").read_text())
    for bad in (1, True, "1110"):
        with pytest.raises(CostcalcError, match="field 'no_rope_layers' must be a list of integers"):
            hf.to_preset({**config, "text_config": {**config["text_config"], "no_rope_layers": bad}}, "x")


def test_an_unknown_field_is_named():
    with pytest.raises(CostcalcError, match="field 'mamba_d_state' .phi3. is not understood"):
        hf.to_preset({"model_type": "phi3", "num_hidden_layers": 2, "mamba_d_state": 16, **BASE}, "x")


def qwen2(**changes):
    return {"model_type": "qwen2", "num_hidden_layers": 4, **BASE, **changes}


def test_qwen2_windows_from_max_window_layers_and_layer_types_must_agree():
    config = qwen2(use_sliding_window=True, sliding_window=8, max_window_layers=3)
    assert kinds(config) == [(3, "gqa.dense"), (1, "window.dense")]            # layers i >= 3
    types = ["full_attention"] * 3 + ["sliding_attention"]
    assert kinds({**config, "layer_types": types}) == kinds(config)
    with pytest.raises(CostcalcError, match="'layer_types' and 'use_sliding_window', 'max_window_layers' disagree"):
        hf.to_preset({**config, "layer_types": ["sliding_attention"] + ["full_attention"] * 3}, "x")
    # what transformers 5.23 writes when windows are off: layer_types all full, sliding_window null
    off = qwen2(use_sliding_window=False, sliding_window=None, layer_types=["full_attention"] * 4)
    assert kinds(off) == [(4, "gqa.dense")]
    with pytest.raises(CostcalcError, match="use_sliding_window is not true"):
        hf.to_preset(qwen2(sliding_window=8, layer_types=["sliding_attention"] * 4), "x")


def test_qwen2_moe_windows_the_even_layers_below_max_window_layers():
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 6, **BASE, "moe_intermediate_size": 32,
              "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
              "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 4}
    preset = hf.to_preset(config, "x")
    # layers 0 and 2 windowed (even, below 4); 1, 3, 4, 5 full
    assert [(g["count"], g["arch"]) for g in preset["layers"]] == [(2, "window.moe_shared_gate"),
                                                                   (4, "gqa.moe_shared_gate")]


def test_qwen3_moe_with_use_sliding_window_windows_every_layer():
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    assert kinds(config) == [(48, "gqa.moe")]
    on = {**config, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}
    assert kinds(on) == [(48, "window.moe")]        # max_window_layers is not read by 5.23


def test_deepseek_moe_layers_follow_first_k_dense_replace_only():
    config = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    assert kinds({**config, "first_k_dense_replace": 5}) == [(5, "mla_q.dense"), (56, "mla_q.moe_shared")]
    with pytest.raises(CostcalcError, match="'moe_layer_freq' is 2"):
        hf.to_preset({**config, "moe_layer_freq": 2}, "x")
    with pytest.raises(CostcalcError, match="'qk_head_dim' is 128"):
        hf.to_preset({**config, "qk_head_dim": 128}, "x")
    with pytest.raises(CostcalcError, match="needs field 'q_lora_rank'"):
        hf.to_preset({k: v for k, v in config.items() if k != "q_lora_rank"}, "x")


def test_checks_where_transformers_would_read_otherwise():
    gemma = json.loads((CONFIGS / "gemma-2-9b.json").read_text())
    with pytest.raises(CostcalcError, match="use_bidirectional_attention must be false"):
        hf.to_preset({**gemma, "use_bidirectional_attention": True}, "x")
    oss = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    with pytest.raises(CostcalcError, match="'experts_per_token' is 2"):
        hf.to_preset({**oss, "experts_per_token": 2}, "x")
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    with pytest.raises(CostcalcError, match="needs field 'sliding_window'"):
        hf.to_preset({k: v for k, v in mistral.items() if k != "sliding_window"}, "x")
    assert kinds({**mistral, "sliding_window": None}) == [(32, "gqa.dense")]
    mixtral = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    with pytest.raises(CostcalcError, match="fields 'num_experts' and 'num_local_experts' .* disagree"):
        hf.to_preset({**mixtral, "num_experts": 4}, "x")
    assert kinds({**{k: v for k, v in mixtral.items() if k != "num_local_experts"}, "num_experts": 8}) == kinds(mixtral)


def test_gemma3_pattern_and_layer_types_agree_and_the_wrapper_ties():
    config = json.loads((CONFIGS / "gemma-3-12b.json").read_text())
    text = config["text_config"]
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(48)]
    assert kinds({**config, "text_config": {**text, "layer_types": types}}) == [(40, "window.dense"), (8, "gqa.dense")]
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**config, "text_config": {**text, "layer_types": ["full_attention"] * 48}}, "x")
    assert hf.to_preset({**config, "tie_word_embeddings": False}, "x")["tied_embeddings"] is False
    assert hf.to_preset({**config, "text_config": {**text, "tie_word_embeddings": False}}, "x")["tied_embeddings"]


def test_phimoe_runs_two_experts_whatever_num_experts_per_tok_says():
    config = json.loads((CONFIGS / "phi-3.5-moe-instruct.json").read_text())
    for k in (1, 2, 4):
        assert hf.to_preset({**config, "num_experts_per_tok": k}, "x")["k"] == 2


def test_llama4_chunks_the_rope_layers_and_needs_a_chunk_size():
    config = json.loads((CONFIGS / "llama-4-scout-17b-16e.json").read_text())
    text = config["text_config"]
    assert kinds(config) == [(36, "chunk.moe_shared"), (12, "gqa.moe_shared")]
    types = ["chunked_attention" if r else "full_attention" for r in text["no_rope_layers"]]
    assert kinds({**config, "text_config": {**text, "layer_types": types}}) == kinds(config)
    with pytest.raises(CostcalcError, match="needs field 'attention_chunk_size'"):
        hf.to_preset({**config, "text_config": {**text, "attention_chunk_size": None}}, "x")
    interleaved = {**text, "interleave_moe_layer_step": 2}
    # MoE on the odd layers; the global (NoPE) layers 3, 7, ... are all odd
    assert kinds({**config, "text_config": interleaved}) == [(24, "chunk.dense"), (12, "chunk.moe_shared"),
                                                            (12, "gqa.moe_shared")]
    dense = hf.to_preset({**config, "text_config": interleaved}, "x")["layers"][0]
    assert dense["m"] == text["intermediate_size_mlp"] != text["intermediate_size"]


def test_exaone4_string_pattern_needs_layer_types_and_must_agree():
    config = json.loads((CONFIGS / "exaone-4.0-32b.json").read_text())
    with pytest.raises(CostcalcError, match="needs field 'layer_types'"):
        hf.to_preset({k: v for k, v in config.items() if k != "layer_types"}, "x")
    with pytest.raises(CostcalcError, match="disagree"):
        hf.to_preset({**config, "sliding_window_pattern": "LLG"}, "x")
    as_int = {**{k: v for k, v in config.items() if k != "layer_types"}, "sliding_window_pattern": 4}
    assert kinds(as_int) == kinds(config) == [(48, "window.dense"), (16, "gqa.dense")]


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


def test_the_cli_refuses_an_out_of_reach_family_in_one_line(tmp_path, capsys):
    from costcalc.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_next", **BASE, "num_hidden_layers": 2}))
    assert main(["prefill", "--config", str(path), "--seq", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "linear attention (Gated DeltaNet)" in err and "\n" not in err


def test_the_cli_says_a_config_without_model_type_misses_the_field(tmp_path, capsys):
    from costcalc.cli import main

    path = tmp_path / "cfg.json"
    path.write_text("{}")
    assert main(["prefill", "--config", str(path), "-s", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: config {str(path)!r}: missing field 'model_type' (the model family; supported: ")
    assert all(family in err for family in hf.FAMILIES) and "\n" not in err


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
        assert hf.to_preset({**family, "use_cla": True, "cla_share_factor": 1, "org_vocab_size": 128}, "x")
        with pytest.raises(CostcalcError, match="across layers"):
            hf.to_preset({**family, "use_cla": True, "cla_share_factor": 2}, "x")
