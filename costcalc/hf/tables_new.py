"""Field tables of the attention + MLP/MoE decoder families added with transformers 5 (see ``fields.py``).

Line numbers cite transformers 5.23's ``models/<family>/configuration_<family>.py`` (C:) and
``modeling_<family>.py`` (M:).
"""
from __future__ import annotations

from .fields import BASE as _BASE, DENSE as _DENSE, HEAD_DIM_READ, ROUTER as _ROUTER, family

_SCALARS = dict(attention_multiplier="softmax scale", embedding_multiplier="scales the embeddings: elementwise",
                logits_scaling="divides the logits: elementwise", residual_multiplier="scales residual branches")
_EVERY_LAYER = "W on every layer (null: no window; M: one sliding mask for the model)"

TABLES = {
    "phi3": family(
        used=_DENSE + " sliding_window", ignored=_BASE + " embd_pdrop original_max_position_embeddings resid_pdrop",
        extra_used="head_dim", extra_ignored="attention_bias", head_dim=HEAD_DIM_READ, sliding_window=_EVERY_LAYER,
        attention_bias="not read: Phi-3's projections have no biases",
        intermediate_size="m of the SwiGLU (fused gate_up_proj: the two projections it fuses)"),
    "phimoe": family(
        used=_DENSE + " num_local_experts sliding_window",
        ignored=_BASE + " attention_bias input_jitter_noise lm_head_bias num_experts_per_tok router_jitter_noise "
                        + _ROUTER,
        extra_used="head_dim", extra_ignored="hidden_dropout original_max_position_embeddings", head_dim=HEAD_DIM_READ,
        sliding_window=_EVERY_LAYER, intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E",
        hidden_dropout="not read: dropout",
        num_experts_per_tok="not read: sparsemixer always routes each token to 2 experts (M:339-454), so k = 2",
        lm_head_bias="LM-head bias: not counted"),
    "granite": family(
        used=_DENSE, ignored=_BASE + " attention_bias attention_multiplier embedding_multiplier logits_scaling mlp_bias "
                                     "residual_multiplier", extra_used="head_dim", head_dim=HEAD_DIM_READ, **_SCALARS),
    "granitemoe": family(
        used=_DENSE + " num_experts_per_tok num_local_experts",
        ignored=_BASE + " attention_bias attention_multiplier embedding_multiplier logits_scaling residual_multiplier "
                        + _ROUTER, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E", **_SCALARS),
    "olmo2": family(used=_DENSE, ignored=_BASE + " attention_bias", extra_used="head_dim", head_dim=HEAD_DIM_READ),
    "olmo3": family(
        used=_DENSE + " layer_types sliding_window", ignored=_BASE + " attention_bias", extra_used="head_dim",
        head_dim=HEAD_DIM_READ, layer_types="which layers are windowed (absent: all but every fourth)"),
    "starcoder2": family(
        used=_DENSE + " sliding_window",
        ignored=_BASE.replace("rms_norm_eps", "norm_epsilon") + " embedding_dropout residual_dropout use_bias",
        extra_used="head_dim", extra_ignored="layer_norm_epsilon norm_type mlp_type",
        head_dim="d_h: not a field, but read when not null (else hidden_size // heads)", sliding_window=_EVERY_LAYER,
        intermediate_size="m of the non-gated MLP (c_fc d x m, c_proj m x d)",
        layer_norm_epsilon="older norm epsilon", norm_type="older norm choice: not a matmul",
        mlp_type="older MLP name: the MLP is the non-gated one whatever it says"),
    "gemma": family(
        used=_DENSE + " head_dim use_bidirectional_attention", ignored=_BASE + " attention_bias",
        use_bidirectional_attention="checked: must be false (a non-causal decoder is not modelled)",
        intermediate_size="m (GeGLU: gate, up, down)"),
    "cohere": family(
        used=_DENSE, ignored=_BASE.replace("rms_norm_eps", "layer_norm_eps") + " attention_bias logit_scale use_qk_norm",
        extra_used="head_dim", head_dim=HEAD_DIM_READ, logit_scale="scales the logits: elementwise",
        use_qk_norm="LayerNorm of q and k: no matmul (its weights are [heads, d_h], not matrices of a product)"),
    "gpt_neox": family(
        used="hidden_size intermediate_size num_attention_heads num_hidden_layers tie_word_embeddings vocab_size",
        ignored=_BASE.replace("rms_norm_eps", "layer_norm_eps") + " attention_bias classifier_dropout hidden_dropout "
                "is_decoder use_parallel_residual",
        extra_ignored="rotary_pct rotary_emb_base num_key_value_heads head_dim",
        num_attention_heads="h_q = h_kv (multi-head: fused query_key_value d x 3d), d_h = hidden_size // heads",
        intermediate_size="m of the non-gated MLP (dense_h_to_4h, dense_4h_to_h)",
        is_decoder="a flag: no weights", use_parallel_residual="parallel or serial residual: the same matmuls",
        rotary_pct="legacy RoPE fraction: elementwise", rotary_emb_base="legacy RoPE base",
        num_key_value_heads="not read: GPT-NeoX attention is multi-head",
        head_dim="not read: the head width is hidden_size // num_attention_heads"),
    "glm4": family(
        used=_DENSE + " head_dim", ignored=_BASE + " attention_bias",
        intermediate_size="m of the SwiGLU (fused gate_up_proj)"),
    "glm4_moe": family(
        used=_DENSE + " first_k_dense_replace moe_intermediate_size n_routed_experts n_shared_experts num_experts_per_tok",
        ignored=_BASE + " attention_bias n_group norm_topk_prob num_nextn_predict_layers routed_scaling_factor "
                        "topk_group use_qk_norm output_router_logits",
        extra_used="head_dim", aliases={"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
        head_dim=HEAD_DIM_READ, intermediate_size="m of the dense layers",
        first_k_dense_replace="layers below it are dense, the rest MoE", n_routed_experts="E",
        n_shared_experts="E_s shared experts of width m_e (one MLP of width m_e * E_s: same FLOPs)",
        num_nextn_predict_layers="multi-token prediction: not built by the causal LM"),
    "ernie4_5_moe": family(
        used=_DENSE + " moe_intermediate_size moe_k moe_layer_end_index moe_layer_interval moe_layer_start_index "
                      "moe_num_experts moe_num_shared_experts",
        ignored=_BASE.replace("attention_dropout ", "") + " moe_norm_min use_bias " + _ROUTER,
        extra_used="head_dim", aliases={"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"},
        head_dim=HEAD_DIM_READ, intermediate_size="m of the dense layers", moe_k="k", moe_num_experts="E",
        moe_num_shared_experts="E_s shared experts of width m_e (0: none)",
        moe_layer_start_index="layer i is MoE iff start <= i <= end and (i+1) % interval == 0",
        moe_layer_end_index="see moe_layer_start_index (-1: the last layer)",
        moe_layer_interval="see moe_layer_start_index", moe_norm_min="routing clamp: elementwise",
        use_bias="biases (LM head too): not counted"),
    "exaone4": family(
        used=_DENSE + " layer_types sliding_window sliding_window_pattern", ignored=_BASE, extra_used="head_dim",
        head_dim=HEAD_DIM_READ, layer_types="which layers are windowed (absent: from the pattern)",
        sliding_window_pattern="older configs: an int p (layer i global iff (i+1) % p == 0) or a string like "
                               "'LLLG'; must agree with layer_types"),
    "smollm3": family(
        used=_DENSE + " layer_types no_rope_layer_interval no_rope_layers sliding_window use_sliding_window",
        ignored=_BASE + " attention_bias mlp_bias", extra_used="head_dim", extra_ignored="max_window_layers pretraining_tp",
        head_dim=HEAD_DIM_READ, use_sliding_window="windows on (false: every layer global whatever layer_types says)",
        layer_types="which layers are windowed (absent: the NoPE layers when use_sliding_window)",
        no_rope_layers="absent layer_types: the NoPE layers (0) are the windowed ones",
        no_rope_layer_interval="absent no_rope_layers: every interval-th layer is NoPE",
        max_window_layers="not read by SmolLM3"),
    "seed_oss": family(
        used=_DENSE + " head_dim", ignored=_BASE + " attention_bias attention_out_bias mlp_bias pretraining_tp "
                                                   "residual_dropout",
        head_dim="d_h (null: hidden_size // heads)", attention_out_bias="o_proj bias: not counted"),
    "apertus": family(
        used=_DENSE, ignored=_BASE + " attention_bias", extra_used="head_dim",
        extra_ignored="mlp_bias qk_norm post_norm", head_dim=HEAD_DIM_READ,
        intermediate_size="m of the non-gated MLP (up_proj, xIELU, down_proj)", hidden_act="xIELU: scalar parameters",
        mlp_bias="not a field: the MLP has no bias", qk_norm="not a field: QK norms are not matmuls",
        post_norm="not a field: norms are not matmuls"),
    "llama4_text": family(
        used=_DENSE + " attention_chunk_size head_dim interleave_moe_layer_step intermediate_size_mlp layer_types "
                      "moe_layers no_rope_layer_interval no_rope_layers num_experts_per_tok num_local_experts",
        ignored=_BASE + " attention_bias attn_scale attn_temperature_tuning floor_scale router_jitter_noise "
                        "use_qk_norm " + _ROUTER,
        extra_ignored="for_llm_compressor cache_implementation",
        head_dim="d_h (null: hidden_size // heads)",
        intermediate_size="m_e, the expert width, and m_s of the one shared expert",
        intermediate_size_mlp="m of the dense layers", num_local_experts="E",
        num_experts_per_tok="k (transformers runs all E experts and zeroes the others: see docs/hf-import.md)",
        moe_layers="the MoE layers (absent: every interleave_moe_layer_step-th)",
        interleave_moe_layer_step="see moe_layers", attention_chunk_size="W_c of the chunked layers",
        layer_types="chunked_attention or full_attention per layer (absent: chunked on the RoPE layers)",
        no_rope_layers="absent layer_types: the RoPE layers (1) are chunked", no_rope_layer_interval="builds no_rope_layers",
        attn_scale="NoPE query scaling: elementwise", attn_temperature_tuning="NoPE query scaling: elementwise",
        floor_scale="NoPE query scaling: elementwise", for_llm_compressor="a tool's marker"),
    "llama4": family(
        used="text_config tie_word_embeddings",
        ignored="boi_token_index eoi_token_index image_token_index vision_config",
        extra_ignored="bos_token_id eos_token_id pad_token_id", aliases={"image_token_id": "image_token_index", "boi_token_id": "boi_token_index",
                 "eoi_token_id": "eoi_token_index"},
        text_config="the decoder that is costed (read as llama4_text)",
        tie_word_embeddings="whether the LM head is tied (the wrapper's flag decides; default false)",
        boi_token_index="token id", eoi_token_index="token id", image_token_index="token id",
        vision_config="the vision tower: not part of the text decoder costed here"),
}
