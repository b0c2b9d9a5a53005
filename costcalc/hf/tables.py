"""Field tables of the families costcalc imported before transformers 5 (see ``fields.py``).

Line numbers cite transformers 5.23's ``models/<family>/configuration_<family>.py`` (C:) and
``modeling_<family>.py`` (M:).
"""
from __future__ import annotations

from .fields import BASE as _BASE, DENSE as _DENSE, HEAD_DIM_READ, ROUTER as _ROUTER, family

_QWEN_WINDOWS = "layer_types max_window_layers sliding_window use_sliding_window"
_MLA = ("first_k_dense_replace num_key_value_heads hidden_size intermediate_size kv_lora_rank moe_intermediate_size n_routed_experts "
        "n_shared_experts num_attention_heads num_experts_per_tok num_hidden_layers q_lora_rank qk_nope_head_dim "
        "qk_rope_head_dim tie_word_embeddings v_head_dim vocab_size qk_head_dim")
_DEEPSEEK = dict(
    head_dim="RoPE width: __post_init__ sets it to qk_rope_head_dim",
    num_key_value_heads="checked equal to num_attention_heads: MLA gives each head its own K and V",
    qk_head_dim="checked: qk_nope_head_dim + qk_rope_head_dim",
    first_k_dense_replace="layers below it are dense, the rest MoE (5.23 reads no other rule)",
    moe_intermediate_size="m_e; the shared MLP is one of width m_e * n_shared_experts (same FLOPs)",
    n_shared_experts="E_s, shared experts of width m_e", n_routed_experts="E", q_lora_rank="r_q (null: no Q LoRA)",
    kv_lora_rank="r_kv", qk_nope_head_dim="d_nope", qk_rope_head_dim="d_rope", v_head_dim="d_v",
    moe_layer_freq="checked: must be 1 (5.23 never reads it; DeepSeek's reference code did)",
    topk_method="expert selection: no matmul", scoring_func="routing score: elementwise",
    aux_loss_alpha="training loss", seq_aux="training loss", ep_size="expert parallelism",
    num_nextn_predict_layers="multi-token prediction: not run by a forward",
)
_GEMMA = dict(use_bidirectional_attention="checked: must be false (a non-causal decoder is not modelled)",
              intermediate_size="m (GeGLU: gate, up, down)")

TABLES = {
    "llama": family(
        used=_DENSE + " head_dim", ignored=_BASE + " attention_bias mlp_bias pretraining_tp",
        head_dim="d_h (null: hidden_size // heads)"),
    "mistral": family(
        used=_DENSE + " head_dim sliding_window", ignored=_BASE,
        head_dim="d_h (null: hidden_size // heads)",
        sliding_window="W on every layer; null: no window (an absent key is the class's 4096: state it)"),
    "qwen2": family(
        used=_DENSE + " " + _QWEN_WINDOWS, ignored=_BASE, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        max_window_layers="older configs: layers i >= it are windowed when use_sliding_window",
        use_sliding_window="older configs: windows on (layer_types must agree)"),
    "qwen3": family(
        used=_DENSE + " head_dim " + _QWEN_WINDOWS, ignored=_BASE + " attention_bias",
        max_window_layers="older configs: layers i >= it are windowed when use_sliding_window",
        use_sliding_window="older configs: windows on (layer_types must agree)"),
    "mixtral": family(
        used=_DENSE + " head_dim num_experts_per_tok num_local_experts sliding_window",
        ignored=_BASE + " " + _ROUTER + " router_jitter_noise", aliases={"num_experts": "num_local_experts"},
        head_dim="d_h (null: hidden_size // heads)", intermediate_size="m_e, the expert width",
        num_local_experts="E", sliding_window="W on every layer (null: no window)"),
    "qwen2_moe": family(
        used=_DENSE + " decoder_sparse_step mlp_only_layers moe_intermediate_size num_experts num_experts_per_tok "
                      "shared_expert_intermediate_size " + _QWEN_WINDOWS,
        ignored=_BASE + " norm_topk_prob qkv_bias " + _ROUTER, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        intermediate_size="m of the dense layers", num_experts="E",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", shared_expert_intermediate_size="m_s of the one gated shared expert",
        max_window_layers="older configs: even layers i < it are windowed when use_sliding_window (5.23)",
        use_sliding_window="older configs: windows on (layer_types must agree)",
        sliding_window="W of the windowed layers (0 or null: none)", qkv_bias="q/k/v biases: not counted"),
    "qwen3_moe": family(
        used=_DENSE + " decoder_sparse_step mlp_only_layers moe_intermediate_size num_experts_per_tok "
                      "num_local_experts sliding_window use_sliding_window",
        ignored=_BASE + " attention_bias norm_topk_prob " + _ROUTER, extra_used="head_dim",
        extra_ignored="max_window_layers", aliases={"num_experts": "num_local_experts"}, head_dim=HEAD_DIM_READ,
        intermediate_size="m of the dense layers", num_local_experts="E (written for the field num_experts)",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", use_sliding_window="true: every layer windowed (5.23)",
        sliding_window="W of every layer when use_sliding_window",
        max_window_layers="not read by 5.23: use_sliding_window windows every layer"),
    "olmoe": family(
        used=_DENSE + " num_experts num_experts_per_tok",
        ignored=_BASE + " attention_bias clip_qkv norm_topk_prob " + _ROUTER, extra_used="head_dim",
        aliases={"num_local_experts": "num_experts"}, head_dim=HEAD_DIM_READ,
        intermediate_size="m_e, the expert width (every layer MoE)", num_experts="E", clip_qkv="clamp: elementwise"),
    "deepseek_v2": family(
        used=_MLA, ignored=_BASE + " attention_bias head_dim mlp_bias n_group norm_topk_prob "
                               "pretraining_tp routed_scaling_factor topk_group topk_method output_router_logits",
        extra_used="moe_layer_freq", extra_ignored="aux_loss_alpha ep_size num_nextn_predict_layers scoring_func seq_aux",
        aliases={"num_experts": "n_routed_experts"}, **_DEEPSEEK),
    "deepseek_v3": family(
        used=_MLA, ignored=_BASE + " attention_bias head_dim n_group norm_topk_prob "
                               "num_nextn_predict_layers pretraining_tp rope_interleave routed_scaling_factor "
                               "topk_group output_router_logits",
        extra_used="moe_layer_freq", extra_ignored="aux_loss_alpha ep_size scoring_func seq_aux topk_method",
        aliases={"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"}, **_DEEPSEEK),
    "gpt_oss": family(
        used=_DENSE + " head_dim layer_types num_experts_per_tok num_local_experts sliding_window",
        ignored=_BASE + " attention_bias swiglu_alpha swiglu_limit " + _ROUTER,
        extra_used="experts_per_token", extra_ignored="initial_context_length", aliases={"num_experts": "num_local_experts"},
        intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E",
        layer_types="which layers are windowed (absent: the even ones)",
        swiglu_alpha="expert activation: elementwise", swiglu_limit="expert activation clamp: elementwise",
        experts_per_token="not read by 5.23: checked equal to num_experts_per_tok",
        initial_context_length="RoPE scaling", attention_bias="biases (router and experts too): not counted"),
    "gemma2": family(
        used=_DENSE + " head_dim layer_types sliding_window use_bidirectional_attention",
        ignored=_BASE.replace("hidden_act", "hidden_activation") + " attention_bias attn_logit_softcapping "
                "final_logit_softcapping query_pre_attn_scalar",
        extra_used="sliding_window_size", extra_ignored="hidden_act cache_implementation",
        layer_types="which layers are windowed (absent: the even ones)",
        sliding_window_size="older duplicate of sliding_window: checked equal",
        hidden_act="older name of hidden_activation: elementwise", **_GEMMA),
    "gemma3_text": family(
        used=_DENSE + " head_dim layer_types sliding_window use_bidirectional_attention _sliding_window_pattern",
        ignored=_BASE.replace("hidden_act", "hidden_activation") + " attention_bias attn_logit_softcapping "
                "final_logit_softcapping query_pre_attn_scalar",
        extra_used="sliding_window_pattern", extra_ignored="rope_local_base_freq hidden_act cache_implementation",
        layer_types="which layers are windowed (absent: from the pattern)",
        _sliding_window_pattern="older configs: layer i is global iff (i+1) % pattern == 0 (layer_types must agree)",
        sliding_window_pattern="legacy spelling of _sliding_window_pattern (must agree)",
        rope_local_base_freq="legacy local RoPE base", hidden_act="older name of hidden_activation: elementwise",
        tie_word_embeddings="tied_embeddings of a text-only model (under the gemma3 wrapper the wrapper's flag)",
        **_GEMMA),
    "gemma3": family(
        used="text_config tie_word_embeddings",
        ignored="boi_token_index eoi_token_index image_token_index initializer_range mm_tokens_per_image vision_config",
        extra_ignored="bos_token_id eos_token_id pad_token_id", aliases={"image_token_id": "image_token_index", "boi_token_id": "boi_token_index",
                 "eoi_token_id": "eoi_token_index"},
        text_config="the decoder that is costed (read as gemma3_text)",
        tie_word_embeddings="whether the LM head is tied (the wrapper's flag decides; default true)",
        boi_token_index="token id", eoi_token_index="token id", image_token_index="token id",
        mm_tokens_per_image="image tokens per image: a prompt length, not a size",
        vision_config="the vision tower: not part of the text decoder costed here"),
}
