"""The field tables, one per family (see ``fields.py``): its configuration class's keys, used or ignored.

Line numbers cite transformers 5.23's ``models/<family>/configuration_<family>.py`` (C:) and
``modeling_<family>.py`` (M:).
"""
from __future__ import annotations

from .fields import BASE, DENSE, HEAD_DIM_READ, ROUTER, family, wrapper

# A config's count of multi-token-prediction layers (hf.MTP_KEYS): 5.23 builds none; costcalc reads them
_MTP_USED = ("the model's multi-token-prediction modules, each a decoder block of its last layer's kind with eh_proj "
             "(2d -> d): not built by 5.23's causal LM; counted apart (mtp_params) and run by --draft mtp")
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
_GEMMA_IGNORED = (BASE.replace("hidden_act", "hidden_activation") + " attention_bias attn_logit_softcapping "
                  "final_logit_softcapping query_pre_attn_scalar")
_GEMMA = dict(use_bidirectional_attention="checked: must be false (a non-causal decoder is not modelled)",
              intermediate_size="m (GeGLU: gate, up, down)")
_SCALARS = dict(attention_multiplier="softmax scale", embedding_multiplier="scales the embeddings: elementwise",
                logits_scaling="divides the logits: elementwise", residual_multiplier="scales residual branches")
_EVERY_LAYER = "W on every layer (null: no window; M: one sliding mask for the model)"

# GPT-2-era configs (GPT-J, GPT-BigCode): their names for the sizes, and the sequence-summary head's settings
_GPT2_NAMES = dict(aliases={"hidden_size": "n_embd", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
                            "max_position_embeddings": "n_positions"},
                   n_embd="d (written for hidden_size)", n_layer="L (written for num_hidden_layers)")
_SUMMARY_HEAD = {key: "sequence-summary head: not built by the causal LM" for key in
                 ("summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
                  "summary_use_proj")}

# Keys Tencent's remote-code Hunyuan configs carry that transformers 5.23's classes do not define
# (both Hunyuan families): the used ones must say what 5.23 builds (hf/families/common.hunyuan_keys).
_HUNYUAN_REMOTE_USED = "use_cla cla_share_factor attention_head_dim"
_HUNYUAN_REMOTE_IGNORED = "use_qk_norm use_rotary_pos_emb norm_type mlp_bias org_vocab_size pad_id"
_HUNYUAN_REMOTE = dict(
    use_cla="not read: cross-layer KV sharing must be off, or share with factor 1 (5.23 builds k_proj and "
            "v_proj on every layer)",
    cla_share_factor="not read: checked 1 when use_cla is true (no sharing is then what runs)",
    attention_head_dim="not read: checked equal to head_dim",
    use_qk_norm="RMSNorm of q and k per head: no matmul (its weights are vectors)",
    use_rotary_pos_emb="RoPE switch: elementwise", norm_type="norm choice: not a matmul",
    mlp_bias="not read: the MLP has no biases (biases are not counted)", org_vocab_size="tokenizer bookkeeping",
    pad_id="token id")

# Mamba-1 (mamba, falcon_mamba): the class's keys, used or ignored
_MAMBA_USED = ("conv_kernel expand hidden_size intermediate_size num_hidden_layers state_size tie_word_embeddings "
               "time_step_rank vocab_size")
_MAMBA_IGNORED = ("bos_token_id eos_token_id hidden_act initializer_range layer_norm_epsilon pad_token_id "
                  "rescale_prenorm_residual residual_in_fp32 time_step_floor time_step_init_scheme time_step_max "
                  "time_step_min time_step_scale use_associative_scan use_bias use_cache use_conv_bias use_mambapy")
_MAMBA = dict(
    intermediate_size="d_in, the inner width (a stated value wins over expand: Falcon-Mamba-7B's 8192 beside expand 16)",
    expand="d_in = int(expand x hidden_size) where intermediate_size is absent (default 2)",
    state_size="N_s, the state per channel (default 16)", conv_kernel="K_c, the convolution kernel (default 4)",
    time_step_rank="r_dt ('auto', the default: ceil(hidden_size / 16))",
    layer_norm_epsilon="norm epsilon", rescale_prenorm_residual="initialisation", residual_in_fp32="residual precision: elementwise",
    time_step_floor="dt initialisation", time_step_init_scheme="dt initialisation", time_step_max="dt initialisation",
    time_step_min="dt initialisation", time_step_scale="dt initialisation",
    use_associative_scan="a compiled scan: the same readout products",
    use_bias="in/out projection biases: not counted", use_conv_bias="convolution bias: not counted",
    use_mambapy="training-time parallel scan: inference runs the loop",
    tie_word_embeddings="tied_embeddings (the class default is true)")
# LFM2 (lfm2, lfm2_moe): the published files' keys 5.23 does not define (conv.py checks the used ones)
_LFM2_EXTRA_USED = "block_dim conv_dim conv_dim_out num_heads block_use_swiglu"
_LFM2_EXTRA_IGNORED = ("block_norm_eps block_mlp_init_scale block_out_init_scale block_use_xavier_init "
                       "conv_use_xavier_init")
_LFM2 = dict(
    conv_L_cache="K_c, the short convolution's kernel (default 3)", conv_bias="convolution and projection biases: not counted",
    norm_eps="norm epsilon", tie_word_embeddings="tied_embeddings (the class default is true)",
    block_dim="not read: checked equal to hidden_size", conv_dim="not read: checked equal to hidden_size",
    conv_dim_out="not read: checked equal to hidden_size", num_heads="not read: checked equal to num_attention_heads",
    block_use_swiglu="not read: checked true (the MLP is always SwiGLU)", block_norm_eps="norm epsilon",
    block_mlp_init_scale="initialisation", block_out_init_scale="initialisation",
    block_use_xavier_init="initialisation", conv_use_xavier_init="initialisation")

TABLES = {
    # the families costcalc imported before transformers 5
    "llama": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias mlp_bias pretraining_tp",
        head_dim="d_h (null: hidden_size // heads)"),
    "mistral": family(
        used=DENSE + " head_dim sliding_window", ignored=BASE,
        head_dim="d_h (null: hidden_size // heads)",
        sliding_window="W on every layer; null: no window (an absent key is the class's 4096: state it)"),
    "qwen2": family(
        used=DENSE + " " + _QWEN_WINDOWS, ignored=BASE, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        max_window_layers="older configs: layers i >= it are windowed when use_sliding_window",
        use_sliding_window="older configs: windows on (layer_types must agree)"),
    # MiMo-7B's remote code (XiaomiMiMo, modeling_mimo.py): MiMoConfig(Qwen2Config) adds
    # num_nextn_predict_layers; the decoder is Qwen2's (Qwen2Model), the MTP layers apart from it.
    "mimo": family(
        used=DENSE + " " + _QWEN_WINDOWS + " num_nextn_predict_layers", ignored=BASE, extra_used="head_dim",
        extra_ignored="attention_bias", head_dim=HEAD_DIM_READ,
        max_window_layers="older configs: layers i >= it are windowed when use_sliding_window",
        use_sliding_window="older configs: windows on (layer_types must agree)",
        num_nextn_predict_layers="MTP layers (MiMoMTPLayers: input_proj 2d -> d and one Qwen2 layer of layer 0's "
                                 "kind each), not run by the decoder's forward: counted apart (mtp_params) and run "
                                 "by --draft mtp",
        attention_bias="q/k/v biases (Qwen2's attention always has them; the key is not read): not counted"),
    "qwen3": family(
        used=DENSE + " head_dim " + _QWEN_WINDOWS, ignored=BASE + " attention_bias",
        max_window_layers="older configs: layers i >= it are windowed when use_sliding_window",
        use_sliding_window="older configs: windows on (layer_types must agree)"),
    "mixtral": family(
        used=DENSE + " head_dim num_experts_per_tok num_local_experts sliding_window",
        ignored=BASE + " " + ROUTER + " router_jitter_noise", aliases={"num_experts": "num_local_experts"},
        head_dim="d_h (null: hidden_size // heads)", intermediate_size="m_e, the expert width",
        num_local_experts="E", sliding_window="W on every layer (null: no window)"),
    "qwen2_moe": family(
        used=DENSE + " decoder_sparse_step mlp_only_layers moe_intermediate_size num_experts num_experts_per_tok "
                     "shared_expert_intermediate_size " + _QWEN_WINDOWS,
        ignored=BASE + " norm_topk_prob qkv_bias " + ROUTER, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        intermediate_size="m of the dense layers", num_experts="E",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", shared_expert_intermediate_size="m_s of the one gated shared expert",
        max_window_layers="older configs: even layers i < it are windowed when use_sliding_window (5.23)",
        use_sliding_window="older configs: windows on (layer_types must agree)",
        sliding_window="W of the windowed layers (0 or null: none)", qkv_bias="q/k/v biases: not counted"),
    "qwen3_moe": family(
        used=DENSE + " decoder_sparse_step mlp_only_layers moe_intermediate_size num_experts_per_tok "
                     "num_local_experts sliding_window use_sliding_window",
        ignored=BASE + " attention_bias norm_topk_prob " + ROUTER, extra_used="head_dim shared_expert_intermediate_size",
        extra_ignored="max_window_layers qkv_bias use_qk_norm", aliases={"num_experts": "num_local_experts"},
        head_dim=HEAD_DIM_READ,
        shared_expert_intermediate_size="published by Qwen3-Coder-480B-A35B, not read by 5.23: checked 0 (qwen3_moe "
                                        "builds no shared expert)",
        use_qk_norm="published by Qwen3-Coder-480B-A35B, not read: Qwen3's per-head QK norms are always built (vectors)",
        intermediate_size="m of the dense layers", num_local_experts="E (written for the field num_experts)",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", use_sliding_window="true: every layer windowed (5.23)",
        sliding_window="W of every layer when use_sliding_window",
        max_window_layers="not read by 5.23: use_sliding_window windows every layer",
        qkv_bias="published by Qwen3-Coder-480B-A35B, not read by 5.23 (attention_bias is): biases are not counted"),
    "olmoe": family(
        used=DENSE + " num_experts num_experts_per_tok",
        ignored=BASE + " attention_bias clip_qkv norm_topk_prob " + ROUTER, extra_used="head_dim",
        aliases={"num_local_experts": "num_experts"}, head_dim=HEAD_DIM_READ,
        intermediate_size="m_e, the expert width (every layer MoE)", num_experts="E", clip_qkv="clamp: elementwise"),
    "deepseek_v2": family(
        used=_MLA, ignored=BASE + " attention_bias head_dim mlp_bias n_group norm_topk_prob "
                               "pretraining_tp routed_scaling_factor topk_group topk_method output_router_logits",
        extra_used="moe_layer_freq", extra_ignored="aux_loss_alpha ep_size num_nextn_predict_layers scoring_func seq_aux",
        aliases={"num_experts": "n_routed_experts"}, **_DEEPSEEK),
    "deepseek_v3": family(
        used=_MLA + " num_nextn_predict_layers", ignored=BASE + " attention_bias head_dim n_group norm_topk_prob "
                               "pretraining_tp rope_interleave routed_scaling_factor topk_group output_router_logits",
        extra_used="moe_layer_freq", extra_ignored="aux_loss_alpha ep_size scoring_func seq_aux topk_method",
        aliases={"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
        **{**_DEEPSEEK, "num_nextn_predict_layers": _MTP_USED}),
    "gpt_oss": family(
        used=DENSE + " head_dim layer_types num_experts_per_tok num_local_experts sliding_window",
        ignored=BASE + " attention_bias swiglu_alpha swiglu_limit " + ROUTER,
        extra_used="experts_per_token", extra_ignored="initial_context_length", aliases={"num_experts": "num_local_experts"},
        intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E",
        layer_types="which layers are windowed (absent: the even ones)",
        swiglu_alpha="expert activation: elementwise", swiglu_limit="expert activation clamp: elementwise",
        experts_per_token="not read by 5.23: checked equal to num_experts_per_tok",
        initial_context_length="RoPE scaling", attention_bias="biases (router and experts too): not counted"),
    "gemma2": family(
        tied=True,
        used=DENSE + " head_dim layer_types sliding_window use_bidirectional_attention",
        ignored=_GEMMA_IGNORED,
        extra_used="sliding_window_size", extra_ignored="hidden_act cache_implementation",
        layer_types="which layers are windowed (absent: the even ones)",
        sliding_window_size="older duplicate of sliding_window: checked equal",
        hidden_act="older name of hidden_activation: elementwise", **_GEMMA),
    "gemma3_text": family(
        tied=True,
        used=DENSE + " head_dim layer_types sliding_window use_bidirectional_attention _sliding_window_pattern",
        ignored=_GEMMA_IGNORED,
        extra_used="sliding_window_pattern", extra_ignored="rope_local_base_freq hidden_act cache_implementation",
        layer_types="which layers are windowed (absent: from the pattern)",
        _sliding_window_pattern="older configs: layer i is global iff (i+1) % pattern == 0 (layer_types must agree)",
        sliding_window_pattern="legacy spelling of _sliding_window_pattern (must agree)",
        rope_local_base_freq="legacy local RoPE base", hidden_act="older name of hidden_activation: elementwise",
        tie_word_embeddings="tied_embeddings of a text-only model (under the gemma3 wrapper the wrapper's flag)",
        **_GEMMA),
    # the attention + MLP/MoE decoder families added with transformers 5
    "phi3": family(
        used=DENSE + " sliding_window", ignored=BASE + " embd_pdrop original_max_position_embeddings resid_pdrop",
        extra_used="head_dim", extra_ignored="attention_bias", head_dim=HEAD_DIM_READ, sliding_window=_EVERY_LAYER,
        attention_bias="not read: Phi-3's projections have no biases",
        intermediate_size="m of the SwiGLU (fused gate_up_proj: the two projections it fuses)"),
    "phimoe": family(
        used=DENSE + " num_local_experts sliding_window",
        ignored=BASE + " attention_bias input_jitter_noise lm_head_bias num_experts_per_tok router_jitter_noise "
                        + ROUTER,
        extra_used="head_dim", extra_ignored="hidden_dropout original_max_position_embeddings", head_dim=HEAD_DIM_READ,
        sliding_window=_EVERY_LAYER, intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E",
        hidden_dropout="not read: dropout",
        num_experts_per_tok="not read: sparsemixer always routes each token to 2 experts (M:339-454), so k = 2",
        lm_head_bias="LM-head bias: not counted"),
    "granite": family(
        used=DENSE, ignored=BASE + " attention_bias attention_multiplier embedding_multiplier logits_scaling mlp_bias "
                                   "residual_multiplier", extra_used="head_dim", head_dim=HEAD_DIM_READ, **_SCALARS),
    "granitemoe": family(
        used=DENSE + " num_experts_per_tok num_local_experts",
        ignored=BASE + " attention_bias attention_multiplier embedding_multiplier logits_scaling residual_multiplier "
                        + ROUTER, extra_used="head_dim", head_dim=HEAD_DIM_READ,
        intermediate_size="m_e, the expert width (every layer MoE)", num_local_experts="E", **_SCALARS),
    "olmo2": family(used=DENSE, ignored=BASE + " attention_bias", extra_used="head_dim", head_dim=HEAD_DIM_READ),
    "olmo3": family(
        used=DENSE + " layer_types sliding_window", ignored=BASE + " attention_bias", extra_used="head_dim",
        head_dim=HEAD_DIM_READ, layer_types="which layers are windowed (absent: all but every fourth)"),
    "starcoder2": family(
        tied=True,
        used=DENSE + " sliding_window",
        ignored=BASE.replace("rms_norm_eps", "norm_epsilon") + " embedding_dropout residual_dropout use_bias",
        extra_used="head_dim", extra_ignored="layer_norm_epsilon norm_type mlp_type",
        head_dim="d_h: not a field, but read when not null (else hidden_size // heads)", sliding_window=_EVERY_LAYER,
        intermediate_size="m of the non-gated MLP (c_fc d x m, c_proj m x d)",
        layer_norm_epsilon="older norm epsilon", norm_type="older norm choice: not a matmul",
        mlp_type="older MLP name: the MLP is the non-gated one whatever it says"),
    "gemma": family(
        tied=True,
        used=DENSE + " head_dim use_bidirectional_attention", ignored=BASE + " attention_bias", **_GEMMA),
    "cohere": family(
        tied=True,
        used=DENSE, ignored=BASE.replace("rms_norm_eps", "layer_norm_eps") + " attention_bias logit_scale use_qk_norm",
        extra_used="head_dim", head_dim=HEAD_DIM_READ, logit_scale="scales the logits: elementwise",
        use_qk_norm="LayerNorm of q and k: no matmul (its weights are [heads, d_h], not matrices of a product)"),
    "gpt_neox": family(
        used="hidden_size intermediate_size num_attention_heads num_hidden_layers tie_word_embeddings vocab_size",
        ignored=BASE.replace("rms_norm_eps", "layer_norm_eps") + " attention_bias classifier_dropout hidden_dropout "
                "is_decoder use_parallel_residual",
        extra_ignored="rotary_pct rotary_emb_base num_key_value_heads head_dim",
        num_attention_heads="h_q = h_kv (multi-head: fused query_key_value d x 3d), d_h = hidden_size // heads",
        intermediate_size="m of the non-gated MLP (dense_h_to_4h, dense_4h_to_h)",
        is_decoder="a flag: no weights", use_parallel_residual="parallel or serial residual: the same matmuls",
        rotary_pct="legacy RoPE fraction: elementwise", rotary_emb_base="legacy RoPE base",
        num_key_value_heads="not read: GPT-NeoX attention is multi-head",
        head_dim="not read: the head width is hidden_size // num_attention_heads"),
    "glm4": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias",
        intermediate_size="m of the SwiGLU (fused gate_up_proj)"),
    "glm4_moe": family(
        used=DENSE + " first_k_dense_replace moe_intermediate_size n_routed_experts n_shared_experts num_experts_per_tok "
                     "num_nextn_predict_layers",
        ignored=BASE + " attention_bias n_group norm_topk_prob routed_scaling_factor "
                       "topk_group use_qk_norm output_router_logits",
        extra_used="head_dim", aliases={"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
        head_dim=HEAD_DIM_READ, intermediate_size="m of the dense layers",
        first_k_dense_replace="layers below it are dense, the rest MoE", n_routed_experts="E",
        n_shared_experts="E_s shared experts of width m_e (one MLP of width m_e * E_s: same FLOPs)",
        num_nextn_predict_layers=_MTP_USED),
    "ernie4_5_moe": family(
        tied=True,
        used=DENSE + " moe_intermediate_size moe_k moe_layer_end_index moe_layer_interval moe_layer_start_index "
                     "moe_num_experts moe_num_shared_experts",
        ignored=BASE.replace("attention_dropout ", "") + " moe_norm_min use_bias " + ROUTER,
        extra_used="head_dim", aliases={"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"},
        head_dim=HEAD_DIM_READ, intermediate_size="m of the dense layers", moe_k="k", moe_num_experts="E",
        moe_num_shared_experts="E_s shared experts of width m_e (0: none)",
        moe_layer_start_index="layer i is MoE iff start <= i <= end and (i+1) % interval == 0",
        moe_layer_end_index="see moe_layer_start_index (-1: the last layer)",
        moe_layer_interval="see moe_layer_start_index", moe_norm_min="routing clamp: elementwise",
        use_bias="biases (LM head too): not counted"),
    "exaone4": family(
        used=DENSE + " layer_types sliding_window sliding_window_pattern", ignored=BASE, extra_used="head_dim",
        head_dim=HEAD_DIM_READ, layer_types="which layers are windowed (absent: from the pattern)",
        sliding_window_pattern="older configs: an int p (layer i global iff (i+1) % p == 0) or a string like "
                               "'LLLG'; must agree with layer_types"),
    "smollm3": family(
        tied=True,
        used=DENSE + " layer_types no_rope_layer_interval no_rope_layers sliding_window use_sliding_window",
        ignored=BASE + " attention_bias mlp_bias", extra_used="head_dim", extra_ignored="max_window_layers pretraining_tp",
        head_dim=HEAD_DIM_READ, use_sliding_window="windows on (false: every layer global whatever layer_types says)",
        layer_types="which layers are windowed (absent: the NoPE layers when use_sliding_window)",
        no_rope_layers="absent layer_types: the NoPE layers (0) are the windowed ones",
        no_rope_layer_interval="absent no_rope_layers: every interval-th layer is NoPE",
        max_window_layers="not read by SmolLM3"),
    "seed_oss": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias attention_out_bias mlp_bias pretraining_tp "
                                                 "residual_dropout",
        head_dim="d_h (null: hidden_size // heads)", attention_out_bias="o_proj bias: not counted"),
    "apertus": family(
        used=DENSE, ignored=BASE + " attention_bias", extra_used="head_dim",
        extra_ignored="mlp_bias qk_norm post_norm", head_dim=HEAD_DIM_READ,
        intermediate_size="m of the non-gated MLP (up_proj, xIELU, down_proj)", hidden_act="xIELU: scalar parameters",
        mlp_bias="not a field: the MLP has no bias", qk_norm="not a field: QK norms are not matmuls",
        post_norm="not a field: norms are not matmuls"),
    "llama4_text": family(
        used=DENSE + " attention_chunk_size head_dim interleave_moe_layer_step intermediate_size_mlp layer_types "
                     "moe_layers no_rope_layer_interval no_rope_layers num_experts_per_tok num_local_experts",
        ignored=BASE + " attention_bias attn_scale attn_temperature_tuning floor_scale router_jitter_noise "
                       "use_qk_norm " + ROUTER,
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
    # older attention + MLP decoders (GPT-J, Phi-1/2, StableLM, Nemotron-4/Minitron)
    "gptj": family(
        used="n_embd n_head n_inner n_layer tie_word_embeddings vocab_size",
        ignored="activation_function attn_pdrop bos_token_id embd_pdrop eos_token_id initializer_range "
                "layer_norm_epsilon n_positions pad_token_id resid_pdrop rotary_dim use_cache",
        extra_ignored="gradient_checkpointing rotary scale_attn_weights tokenizer_class " + " ".join(_SUMMARY_HEAD),
        **_GPT2_NAMES,
        n_head="h_q = h_kv (multi-head: q, k, v, out_proj d x d), d_h = n_embd // n_head",
        n_inner="m of the non-gated MLP (fc_in, fc_out; null: 4 * n_embd)",
        n_positions="position range: no matmul shape", activation_function="activation: elementwise",
        attn_pdrop="dropout", layer_norm_epsilon="norm epsilon",
        rotary_dim="RoPE width (partial rotary): elementwise", tie_word_embeddings="tied_embeddings (LM-head bias not counted)",
        gradient_checkpointing="legacy training switch", rotary="legacy flag: GPT-J always applies RoPE",
        scale_attn_weights="legacy flag: the softmax scale", **_SUMMARY_HEAD, tokenizer_class="tokenizer choice"),
    "phi": family(
        used=DENSE, ignored=BASE.replace("rms_norm_eps", "layer_norm_eps") + " embd_pdrop qk_layernorm resid_pdrop",
        extra_used="head_dim", head_dim=HEAD_DIM_READ,
        intermediate_size="m of the non-gated MLP (fc1, fc2)",
        qk_layernorm="LayerNorm of q and k per head: no matmul (its weights are vectors)"),
    "stablelm": family(
        used=DENSE, ignored=BASE.replace("rms_norm_eps", "layer_norm_eps") + " hidden_dropout qk_layernorm "
                                                                              "use_parallel_residual use_qkv_bias",
        num_attention_heads="h_q; d_h = hidden_size // heads (no head_dim key is read for the projections)",
        num_key_value_heads="h_kv (the class default is a fixed 32: state it)",
        intermediate_size="m of the SwiGLU (gate, up, down)",
        qk_layernorm="LayerNorm of q and k per head: no matmul (its weights are vectors)",
        use_parallel_residual="parallel or serial residual: the same matmuls", use_qkv_bias="q/k/v biases: not counted"),
    "nemotron": family(
        used=DENSE + " head_dim", ignored=BASE.replace("rms_norm_eps", "norm_eps") + " attention_bias mlp_bias",
        head_dim="d_h (null: hidden_size // heads; Minitron-8B's 128 * 48 heads != hidden_size)",
        num_key_value_heads="h_kv (the class default is null, which the attention cannot run: state it)",
        intermediate_size="m of the non-gated MLP (up_proj, squared ReLU, down_proj)", norm_eps="norm epsilon"),
    # the attention + SwiGLU decoder families added later
    "ministral": family(
        used=DENSE + " head_dim layer_types sliding_window", ignored=BASE,
        head_dim="d_h (must be a number: 5.23 cannot build the model with head_dim null)",
        sliding_window="W of the sliding_attention layers; null: no window (an absent key is the class's 4096: state it)",
        layer_types="which layers are windowed (absent: every layer when sliding_window is set, else none)"),
    "ernie4_5": family(
        tied=True,
        used=DENSE + " head_dim", ignored=BASE.replace("attention_dropout ", "") + " use_bias",
        head_dim="d_h (null: hidden_size // heads; an absent key is the class's 128: state it)",
        use_bias="q/k/v/o and MLP biases: not counted"),
    "helium": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias mlp_bias",
        head_dim="d_h (a number; o_proj is hidden_size x hidden_size, so heads x d_h must equal hidden_size)"),
    "olmo": family(
        used=DENSE, ignored=BASE.replace("rms_norm_eps ", "") + " attention_bias clip_qkv", extra_used="head_dim",
        head_dim=HEAD_DIM_READ, clip_qkv="clamp of q, k, v: elementwise"),
    # older attention + non-gated MLP decoders: learned positions or ALiBi, fused projections
    "gpt_bigcode": family(
        tied=True,
        used="add_cross_attention multi_query n_embd n_head n_inner n_layer num_key_value_heads tie_word_embeddings "
             "vocab_size",
        ignored="activation_function attention_softmax_in_fp32 attn_pdrop bos_token_id embd_pdrop eos_token_id "
                "initializer_range layer_norm_epsilon n_positions pad_token_id resid_pdrop "
                "scale_attention_softmax_in_fp32 scale_attn_weights use_cache",
        extra_ignored="runner_max_sequence_length " + " ".join(_SUMMARY_HEAD),
        **_GPT2_NAMES,
        n_head="h_q (fused c_attn d x (d + 2 h_kv d_h)), d_h = n_embd // n_head",
        multi_query="h_kv = 1 (true: multi-query) or h_q (false)",
        num_key_value_heads="written by __post_init__ from multi_query: checked equal to what multi_query says",
        n_inner="m of the non-gated MLP (c_fc, c_proj; null: 4 * n_embd)",
        add_cross_attention="must be false: cross-attention blocks are not part of a decoder-only model",
        n_positions="learned position table rows: a lookup, no matmul (its parameters are not counted)",
        activation_function="activation: elementwise", attn_pdrop="dropout", layer_norm_epsilon="norm epsilon",
        attention_softmax_in_fp32="softmax precision", scale_attention_softmax_in_fp32="softmax precision",
        scale_attn_weights="the softmax scale", tie_word_embeddings="tied_embeddings (the class default is true)",
        runner_max_sequence_length="a legacy inference-runner setting", **_SUMMARY_HEAD),
    "opt": family(
        tied=True,
        used="ffn_dim hidden_size num_attention_heads num_hidden_layers tie_word_embeddings vocab_size "
             "word_embed_proj_dim",
        ignored="_remove_final_layer_norm activation_function attention_dropout bos_token_id do_layer_norm_before "
                "dropout enable_bias eos_token_id init_std layer_norm_elementwise_affine layerdrop "
                "max_position_embeddings pad_token_id use_cache",
        extra_ignored="activation_dropout prefix output_projection",
        num_attention_heads="h_q = h_kv (multi-head: q, k, v, out_proj d x d), d_h = hidden_size // heads",
        ffn_dim="m of the non-gated MLP (fc1, ReLU, fc2)",
        word_embed_proj_dim="must equal hidden_size (null: hidden_size): otherwise project_in/project_out run "
                            "products costcalc does not model, and the import is refused",
        max_position_embeddings="learned position table rows: a lookup, no matmul (its parameters are not counted)",
        _remove_final_layer_norm="a norm: no matmul", do_layer_norm_before="norm placement: no matmul",
        layer_norm_elementwise_affine="norm weights: no matmul", enable_bias="q/k/v/out and MLP biases: not counted",
        dropout="dropout", layerdrop="training layer drop", init_std="initialisation",
        activation_function="activation: elementwise", tie_word_embeddings="tied_embeddings (the class default is true)",
        activation_dropout="not read: dropout", prefix="a generation prefix string",
        output_projection="a metaseq flag: transformers always builds the LM head"),
    "bloom": family(
        tied=True,
        used="hidden_size n_head n_layer tie_word_embeddings vocab_size",
        ignored="apply_residual_connection_post_layernorm attention_dropout bos_token_id eos_token_id "
                "hidden_dropout initializer_range layer_norm_epsilon pad_token_id pretraining_tp slow_but_exact "
                "use_cache",
        extra_used="n_inner",
        extra_ignored="attention_softmax_in_fp32 bias_dropout_fusion masked_softmax_fusion offset_alibi seq_length "
                      "skip_bias_add skip_bias_add_qkv unk_token_id",
        aliases={"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "n_embed": "hidden_size"},
        hidden_size="d (published files write n_embed, which __post_init__ reads as hidden_size)",
        n_layer="L (written for num_hidden_layers)",
        n_head="h_q = h_kv (multi-head: fused query_key_value d x 3d, dense d x d), d_h = hidden_size // heads",
        n_inner="not read: the MLP is 4 x hidden_size (dense_h_to_4h, dense_4h_to_h); checked null or 4 x hidden_size",
        apply_residual_connection_post_layernorm="which tensor is the residual: no matmul",
        pretraining_tp="with slow_but_exact: the same products in column slices (same FLOPs)",
        slow_but_exact="the same products in column slices (same FLOPs)",
        tie_word_embeddings="tied_embeddings (the class default is true)",
        attention_softmax_in_fp32="softmax precision", bias_dropout_fusion="a Megatron kernel switch",
        masked_softmax_fusion="a Megatron kernel switch", offset_alibi="a Megatron ALiBi setting: not read",
        seq_length="training sequence length: no matmul shape", skip_bias_add="a Megatron kernel switch",
        skip_bias_add_qkv="a Megatron kernel switch", unk_token_id="token id", layer_norm_epsilon="norm epsilon"),
    "mpt": family(
        tied=True,
        used="attn_config d_model expansion_ratio n_heads n_layers tie_word_embeddings vocab_size",
        ignored="bos_token_id emb_pdrop embedding_fraction eos_token_id init_device initializer_range "
                "layer_norm_epsilon learned_pos_emb logit_scale max_seq_len no_bias norm_type pad_token_id "
                "resid_pdrop use_cache",
        extra_ignored="init_config tokenizer_name verbose",
        aliases={"num_attention_heads": "n_heads", "hidden_size": "d_model", "num_hidden_layers": "n_layers"},
        d_model="d (written for hidden_size)", n_layers="L (written for num_hidden_layers)",
        n_heads="h_q = h_kv (multi-head: fused Wqkv d x 3d, out_proj d x d), d_h = d_model // n_heads",
        attn_config="the attention's settings, each in the attn_config table (attn_type must be multihead_attention)",
        expansion_ratio="checked: must be 4 (null: 4): transformers 5.23 builds up_proj d x 4d, down_proj 4d x d "
                        "whatever it says",
        learned_pos_emb="not read: transformers 5.23 builds no position table (ALiBi)",
        logit_scale="not read by 5.23 (a logit scale: elementwise)", max_seq_len="ALiBi table length: elementwise",
        no_bias="not read: 5.23 builds no linear biases", norm_type="norm choice: no matmul",
        embedding_fraction="gradient scaling of the embedding", init_device="initialisation device",
        emb_pdrop="dropout", tie_word_embeddings="tied_embeddings (the class default is true)",
        init_config="initialisation settings", tokenizer_name="tokenizer choice", verbose="logging level",
        layer_norm_epsilon="norm epsilon"),
    # attention + MLP decoders added later
    "cohere2": family(
        tied=True,
        used=DENSE + " head_dim layer_types sliding_window",
        ignored=BASE.replace("rms_norm_eps", "layer_norm_eps") + " attention_bias logit_scale",
        extra_used="sliding_window_pattern order_of_interleaved_layers use_gated_activation use_embedding_sharing",
        extra_ignored="cache_implementation position_embedding_type rotary_pct use_parallel_block use_parallel_embedding",
        head_dim="d_h (__post_init__ writes hidden_size // heads; a head_dim the config carries wins)",
        sliding_window="W of the sliding_attention layers (the class default 4096: state it when a layer is windowed)",
        layer_types="which layers are windowed (absent: from sliding_window_pattern, default 4: every 4th global)",
        logit_scale="scales the logits: elementwise",
        sliding_window_pattern="older configs: layer i is global iff (i+1) % pattern == 0 (layer_types must agree)",
        order_of_interleaved_layers="not read: checked 'local_attn_first' (the sliding layers come first, as 5.23 places them)",
        use_gated_activation="not read: checked true (5.23's MLP is always the gated SwiGLU)",
        use_embedding_sharing="not read: checked equal to tie_word_embeddings (which 5.23 reads)",
        position_embedding_type="not read: RoPE on the sliding layers, elementwise",
        rotary_pct="legacy RoPE fraction: elementwise",
        use_parallel_block="not read: the block is parallel, the same matmuls as a serial one",
        use_parallel_embedding="tensor-parallel embedding: no matmul"),
    "glm": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias",
        head_dim="d_h (must be a number: 5.23 reads it as is; an absent key is the class's 128: state it)",
        num_key_value_heads="h_kv (the class default is a fixed 2: state it)",
        intermediate_size="m of the SwiGLU (fused gate_up_proj: the two projections it fuses)",
        attention_bias="q/k/v biases: not counted"),
    "hunyuan_v1_dense": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias eod_token_id pretraining_tp",
        extra_used=_HUNYUAN_REMOTE_USED, extra_ignored=_HUNYUAN_REMOTE_IGNORED + " sep_token_id",
        head_dim="d_h (must be a number: 5.23 reads it as is, null cannot build)",
        eod_token_id="token id", sep_token_id="token id", **_HUNYUAN_REMOTE),
    "arcee": family(
        used=DENSE + " head_dim", ignored=BASE + " attention_bias mlp_bias",
        head_dim="d_h (null: hidden_size // heads; hidden_size must be a multiple of the heads)",
        intermediate_size="m of the non-gated MLP (up_proj, ReLU^2, down_proj)"),
    "vaultgemma": family(
        tied=True,
        used=DENSE + " head_dim layer_types sliding_window", ignored=_GEMMA_IGNORED, extra_ignored="cache_implementation",
        head_dim="d_h (the class default is a fixed 256: state it)",
        num_key_value_heads="h_kv (the class default is a fixed 4: state it)",
        layer_types="which layers are windowed (absent: the even ones)",
        intermediate_size="m (GeGLU: gate, up, down)"),

    # MoE families added later
    "dots1": family(
        used=DENSE + " first_k_dense_replace layer_types max_window_layers moe_intermediate_size n_routed_experts "
                     "n_shared_experts num_experts_per_tok sliding_window",
        ignored=BASE + " attention_bias n_group norm_topk_prob routed_scaling_factor topk_group output_router_logits",
        extra_used="head_dim moe_layer_freq", extra_ignored="scoring_func use_sliding_window",
        aliases={"num_local_experts": "n_routed_experts"}, head_dim=HEAD_DIM_READ,
        intermediate_size="m of the dense layers", first_k_dense_replace="layers below it are dense, the rest MoE",
        n_routed_experts="E", n_shared_experts="E_s shared experts of width m_e (one MLP of width m_e * E_s: same FLOPs)",
        layer_types="which layers are windowed (absent: layers i >= max_window_layers when sliding_window is set)",
        max_window_layers="absent layer_types: layers i >= it are windowed when sliding_window is set (class default 62)",
        sliding_window="W of the windowed layers (null: none; the class default 4096 must be stated where it windows)",
        moe_layer_freq="checked: must be 1 (5.23 never reads it: every layer from first_k_dense_replace on is MoE)",
        scoring_func="routing score: elementwise (5.23 always uses sigmoid)",
        use_sliding_window="not read by 5.23 (sliding_window and max_window_layers, or layer_types, decide): "
                           "checked to say whether a layer is windowed"),
    "hunyuan_v1_moe": family(
        used=DENSE + " head_dim moe_topk num_experts",
        ignored=BASE + " attention_bias eod_token_id pretraining_tp sep_token_id output_router_logits",
        extra_used=_HUNYUAN_REMOTE_USED + " moe_intermediate_size num_shared_expert use_mixed_mlp_moe",
        extra_ignored=_HUNYUAN_REMOTE_IGNORED,
        aliases={"num_experts_per_tok": "moe_topk", "num_local_experts": "num_experts"},
        head_dim="d_h (must be a number: 5.23 reads it as is, null cannot build)",
        intermediate_size="m_e of every expert and m_s of the one shared MLP (every layer MoE)",
        num_experts="E (an integer: 5.23's experts cannot be built from a per-layer list)",
        moe_topk="k, an integer or one per layer", eod_token_id="token id", sep_token_id="token id",
        moe_intermediate_size="not read by 5.23 (experts are intermediate_size wide): checked equal to it",
        num_shared_expert="not read by 5.23 (one shared MLP of intermediate_size): checked to be 1",
        use_mixed_mlp_moe="not read by 5.23 (the shared MLP is always built): checked true", **_HUNYUAN_REMOTE),
    # Mamba-1 and short-convolution families (issue #18): a state-keeping mixer in the attention's slot
    # (hf/families/conv.py; M: modeling_mamba.py MambaMixer, modeling_lfm2.py Lfm2ShortConv, Lfm2MLP)
    "mamba": family(tied=True, used=_MAMBA_USED, ignored=_MAMBA_IGNORED, extra_used="n_layer",
                    extra_ignored="fused_add_norm pad_vocab_size_multiple rms_norm",
                    n_layer="the original repository's name: not read, checked equal to num_hidden_layers",
                    fused_add_norm="a kernel fusion: no matmul", rms_norm="norm choice: no matmul",
                    pad_vocab_size_multiple="vocab_size is already padded to it", **_MAMBA),
    "falcon_mamba": family(tied=True, used=_MAMBA_USED, ignored=_MAMBA_IGNORED + " mixer_rms_eps",
                           extra_ignored="use_falcon_mambapy",
                           mixer_rms_eps="epsilon of the weightless RMSNorms of dt, B and C: elementwise",
                           use_falcon_mambapy="legacy name of use_mambapy (training-time parallel scan)", **_MAMBA),
    "jamba": family(
        used=DENSE + " attn_layer_offset attn_layer_period expert_layer_offset expert_layer_period mamba_d_conv "
                     "mamba_d_state mamba_dt_rank mamba_expand num_experts num_experts_per_tok",
        ignored=BASE.replace("rope_parameters ", "") + " mamba_conv_bias mamba_proj_bias use_associative_scan "
                "use_mamba_kernels use_mambapy " + ROUTER,
        extra_used="head_dim", extra_ignored="num_logits_to_keep", aliases={"num_local_experts": "num_experts"},
        head_dim=HEAD_DIM_READ, num_key_value_heads="h_kv of the attention layers (the class default is a fixed 8: state it)",
        intermediate_size="m of the dense layers and m_e of every expert",
        attn_layer_period="layer i attends iff i % period == attn_layer_offset (default 8)",
        attn_layer_offset="see attn_layer_period (default 4); the other layers run Mamba-1",
        expert_layer_period="layer i is MoE iff i % period == expert_layer_offset and num_experts > 1 (default 2)",
        expert_layer_offset="see expert_layer_period (default 1)", num_experts="E (1: every layer dense)",
        mamba_d_state="N_s, the state per channel (default 16)", mamba_d_conv="K_c, the convolution kernel (default 4)",
        mamba_dt_rank="r_dt ('auto': ceil(hidden_size / 16))", mamba_expand="d_in = mamba_expand x hidden_size (default 2)",
        mamba_conv_bias="convolution bias: not counted", mamba_proj_bias="in/out projection biases: not counted",
        use_mamba_kernels="CUDA kernel choice: the conventions say what is counted",
        use_mambapy="training-time parallel scan: inference runs the loop",
        use_associative_scan="a compiled scan: the same readout products",
        num_logits_to_keep="a generation setting (the workloads say which logits are computed)"),
    "lfm2": family(
        tied=True,
        used="block_auto_adjust_ff_dim block_ffn_dim_multiplier block_multiple_of conv_L_cache full_attn_idxs "
             "hidden_size intermediate_size layer_types num_attention_heads num_hidden_layers num_key_value_heads "
             "tie_word_embeddings vocab_size",
        ignored="bos_token_id conv_bias eos_token_id initializer_range max_position_embeddings norm_eps pad_token_id "
                "rope_parameters use_cache",
        extra_used="head_dim " + _LFM2_EXTRA_USED, extra_ignored=_LFM2_EXTRA_IGNORED,
        aliases={"block_ff_dim": "intermediate_size", "tie_embedding": "tie_word_embeddings"},
        head_dim=HEAD_DIM_READ, intermediate_size="the MLP width before block_auto_adjust_ff_dim adjusts it",
        block_auto_adjust_ff_dim="m = int(2/3 x intermediate_size), then the multiplier and rounding (default true)",
        block_ffn_dim_multiplier="with the adjustment: m scaled by it, then rounded up to block_multiple_of (null: neither)",
        block_multiple_of="the rounding of the adjusted m (default 256)",
        full_attn_idxs="the attention layers where layer_types is absent (both absent: every layer attends)",
        layer_types="conv (shortconv) or full_attention per layer", **_LFM2),
    "lfm2_moe": family(
        tied=True,
        used="conv_L_cache hidden_size intermediate_size layer_types moe_intermediate_size num_attention_heads "
             "num_dense_layers num_experts num_experts_per_tok num_hidden_layers num_key_value_heads "
             "tie_word_embeddings vocab_size",
        ignored="bos_token_id conv_bias eos_token_id initializer_range max_position_embeddings norm_eps norm_topk_prob "
                "output_router_logits pad_token_id rope_parameters routed_scaling_factor use_cache use_expert_bias",
        extra_used="head_dim " + _LFM2_EXTRA_USED, extra_ignored=_LFM2_EXTRA_IGNORED,
        aliases={"tie_embedding": "tie_word_embeddings"},
        head_dim=HEAD_DIM_READ, intermediate_size="m of the first num_dense_layers layers (no adjustment)",
        layer_types="conv (shortconv) or full_attention per layer (must be written: the class derives none)",
        num_dense_layers="layers below it are dense, the rest MoE (default 2)", num_experts="E",
        use_expert_bias="a selection bias buffer: no matmul", **_LFM2),
    # multimodal wrappers: the text decoder is what costs
    "gemma3": wrapper("gemma3_text", tied=True, ignored="initializer_range mm_tokens_per_image",
                      mm_tokens_per_image="image tokens per image: a prompt length, not a size"),
    "llama4": wrapper("llama4_text", tied=False),
}

# Nested sub-configurations a family reads (family -> key -> table), each held against its class by
# tests/test_hf_transformers.py like the tables above.
SUBTABLES = {
    "mpt": {"attn_config": family(
        used="attn_type",
        ignored="alibi alibi_bias_max attn_impl attn_pdrop attn_uses_sequence_id clip_qkv prefix_lm qk_ln "
                "softmax_scale",
        attn_type="checked: must be multihead_attention (5.23 builds Wqkv d x 3d whatever it says)",
        alibi="not read: 5.23 always adds ALiBi (elementwise)", alibi_bias_max="ALiBi slopes: elementwise",
        attn_impl="kernel choice: the conventions say what is counted", attn_pdrop="dropout",
        attn_uses_sequence_id="mask only: no matmul shape", clip_qkv="clamp of q, k, v: elementwise",
        prefix_lm="not read by 5.23 (mask only: no matmul shape)", qk_ln="not read by 5.23 (norms: no matmul)",
        softmax_scale="score scale")},
}

# State-space families (Mamba-2 mixers; hf/families/ssm.py). Keys every one of them shares:
_SSM_WHY = dict(
    time_step_limit="dt clamp: elementwise", time_step_min="dt initialisation", time_step_max="dt initialisation",
    time_step_floor="dt initialisation", use_mamba_kernels="kernel choice (the torch path is what is counted)",
    mamba_hidden_act="mixer activation: elementwise", residual_in_fp32="residual precision",
    rescale_prenorm_residual="initialisation", num_logits_to_keep="generation default: which logits are computed",
    z_loss_coefficient="training loss", mamba_proj_bias="in_proj/out_proj biases: not counted",
    mamba_conv_bias="conv bias: not counted", use_conv_bias="conv bias: not counted",
    mamba_d_head="d_m ('auto': mamba_expand x hidden_size // mamba_n_heads); h_m x d_m must be the mixer width",
    mamba_n_heads="h_m, the mixer's heads", mamba_n_groups="G, groups of B and C", mamba_d_state="N_s",
    mamba_d_conv="K_c, the conv kernel", mamba_chunk_size="Q_c, the chunk of the torch path's chunked scan",
    mamba_expand="the mixer width mamba_expand x hidden_size (= h_m x d_m)",
    position_embedding_type="RoPE or none: elementwise", projectors_bias="in_proj/out_proj biases: not counted",
    layer_norm_epsilon="norm epsilon")
_SSM_ATTN = "num_attention_heads num_key_value_heads"
_MAMBA_KEYS = "mamba_chunk_size mamba_d_conv mamba_d_head mamba_d_state mamba_expand mamba_n_groups mamba_n_heads"
TABLES.update({
    "mamba2": family(
        used="chunk_size conv_kernel expand head_dim hidden_size n_groups num_heads num_hidden_layers state_size "
             "tie_word_embeddings vocab_size",
        ignored="bos_token_id eos_token_id hidden_act initializer_range layer_norm_epsilon pad_token_id "
                "rescale_prenorm_residual residual_in_fp32 time_step_floor time_step_limit time_step_max "
                "time_step_min time_step_rank use_bias use_cache use_conv_bias",
        num_heads="h_m", head_dim="d_m (the mixer's head width, not an attention head)", n_groups="G",
        state_size="N_s", conv_kernel="K_c", chunk_size="Q_c, the chunk of the torch path's chunked scan",
        expand="checked: expand x hidden_size must equal num_heads x head_dim (transformers refuses otherwise)",
        time_step_rank="not read by the Mamba-2 mixer (dt is h_m columns of in_proj)",
        use_bias="in_proj/out_proj biases: not counted", **_SSM_WHY),
    "bamba": family(
        used=DENSE + " attn_layer_indices " + _MAMBA_KEYS,
        ignored=BASE + " attention_bias mamba_conv_bias mamba_proj_bias mlp_bias num_logits_to_keep time_step_limit "
                       "z_loss_coefficient",
        extra_used="head_dim layer_types layers_block_type", head_dim=HEAD_DIM_READ,
        layer_types="not read (derived from attn_layer_indices): checked to agree with it",
        layers_block_type="not read (derived from attn_layer_indices): checked to agree with it",
        attn_layer_indices="the attention layers (the others run the Mamba-2 mixer); every layer has the SwiGLU",
        intermediate_size="m of every layer's SwiGLU", **_SSM_WHY),
    "granitemoehybrid": family(
        used=DENSE + " layer_types num_experts_per_tok num_local_experts shared_intermediate_size " + _MAMBA_KEYS,
        ignored=BASE + " " + ROUTER + " attention_bias attention_multiplier embedding_multiplier logits_scaling "
                       "mamba_conv_bias mamba_proj_bias position_embedding_type residual_multiplier time_step_limit",
        extra_used="head_dim", head_dim=HEAD_DIM_READ,
        aliases={"layers_block_type": "layer_types"},
        layer_types="which layers attend (full_attention / attention) and which run the Mamba-2 mixer (linear_attention / mamba)",
        intermediate_size="m_e, the routed experts' width (SwiGLU)", num_local_experts="E (0: no routed experts)",
        shared_intermediate_size="the shared SwiGLU every layer runs: m_s (m where there are no experts)",
        **_SCALARS, **_SSM_WHY),
    "falcon_h1": family(
        used=DENSE + " mamba_d_ssm " + _MAMBA_KEYS,
        extra_used="head_dim layer_types layers_block_type",
        layer_types="not read: every layer is hybrid (attention beside the mixer); checked to say so",
        layers_block_type="not read: every layer is hybrid (attention beside the mixer); checked to say so",
        ignored=BASE + " attention_bias attention_in_multiplier attention_out_multiplier embedding_multiplier "
                       "key_multiplier lm_head_multiplier mamba_conv_bias mamba_norm_before_gate mamba_proj_bias "
                       "mamba_rms_norm mlp_bias mlp_multipliers num_logits_to_keep projectors_bias "
                       "ssm_in_multiplier ssm_multipliers ssm_out_multiplier time_step_limit",
        head_dim=HEAD_DIM_READ,
        mamba_d_ssm="the mixer width h_m x d_m (null: mamba_expand x hidden_size)",
        mamba_expand="the mixer width mamba_expand x hidden_size where mamba_d_ssm is null",
        intermediate_size="m of every layer's SwiGLU (attention and the mixer run side by side before it)",
        **{k: "a muP scale: elementwise" for k in ("attention_in_multiplier", "attention_out_multiplier",
                                                    "embedding_multiplier", "key_multiplier", "lm_head_multiplier",
                                                    "mlp_multipliers", "ssm_in_multiplier", "ssm_multipliers",
                                                    "ssm_out_multiplier")},
        mamba_norm_before_gate="gated-norm order: elementwise", mamba_rms_norm="the mixer's gated norm: elementwise",
        **{k: v for k, v in _SSM_WHY.items() if k != "mamba_expand"}),
    "nemotron_h": family(
        used="chunk_size conv_kernel hidden_size head_dim intermediate_size layers_block_type mamba_head_dim "
             "mamba_num_heads moe_intermediate_size moe_latent_size moe_shared_expert_intermediate_size n_groups "
             "n_routed_experts n_shared_experts num_attention_heads num_experts_per_tok num_key_value_heads "
             "ssm_state_size tie_word_embeddings vocab_size",
        ignored="attention_bias attention_dropout bos_token_id eos_token_id expand hidden_dropout initializer_range "
                "layer_norm_epsilon mamba_hidden_act mamba_proj_bias mamba_ssm_cache_dtype max_position_embeddings "
                "mlp_bias mlp_hidden_act moe_shared_expert_overlap mtp_layers_block_type n_group norm_topk_prob "
                "num_logits_to_keep num_nextn_predict_layers output_router_logits pad_token_id "
                "rescale_prenorm_residual residual_in_fp32 routed_scaling_factor sliding_window time_step_floor "
                "time_step_limit time_step_max time_step_min topk_group use_bias use_cache use_conv_bias "
                "use_mamba_kernels",
        extra_used="hybrid_override_pattern num_hidden_layers attention_head_dim",
        extra_ignored="mtp_hybrid_override_pattern rms_norm_eps mamba_dt_min mamba_dt_max mamba_dt_limit "
                      "mamba_dt_init_floor",
        aliases={"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts",
                 "mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
                 "mamba_chunk_size": "chunk_size", "mamba_conv_bias": "use_conv_bias"},
        layers_block_type="each layer's one sublayer: mamba / linear_attention (mamba2.none), attention / "
                          "full_attention (gqa.none), mlp (none.mlp), moe (none.moe_plain_shared)",
        hybrid_override_pattern="legacy layer string M (mamba) * (attention) - (mlp) E (moe); layers_block_type wins",
        num_hidden_layers="not read (the layer list's length is): checked equal to it",
        attention_head_dim="remote-code spelling of head_dim: checked equal to it where both are written",
        head_dim="d_h of the attention layers (the class default is a fixed 128: state it)",
        intermediate_size="m of the mlp layers (non-gated: up_proj, relu2, down_proj)",
        mamba_num_heads="h_m", mamba_head_dim="d_m (the mixer width is mamba_num_heads x mamba_head_dim)",
        n_groups="G", ssm_state_size="N_s", conv_kernel="K_c", chunk_size="Q_c, the chunk of the torch path's chunked scan",
        expand="not read by the mixer (its width is mamba_num_heads x mamba_head_dim)",
        moe_intermediate_size="m_e of the routed experts (non-gated: up_proj, down_proj)",
        moe_shared_expert_intermediate_size="m_s of the one shared expert (non-gated)",
        moe_latent_size="must be null: a latent projection around the experts (fc1/fc2_latent_proj) is not modelled",
        n_routed_experts="E", n_shared_experts="checked 1 (5.23 builds one shared expert whatever it says)",
        mamba_ssm_cache_dtype="not read by 5.23's torch path: the state is float32 whatever it says (state_dtype fp32)",
        mlp_hidden_act="activation: elementwise", moe_shared_expert_overlap="a kernel-overlap switch",
        mtp_layers_block_type="multi-token prediction layers: not run by a forward",
        mtp_hybrid_override_pattern="multi-token prediction layers: not run by a forward",
        num_nextn_predict_layers="multi-token prediction: not run by a forward",
        sliding_window="not read by 5.23's nemotron_h attention",
        rms_norm_eps="remote-code norm epsilon", mamba_dt_min="dt initialisation", mamba_dt_max="dt initialisation",
        mamba_dt_limit="dt clamp: elementwise", mamba_dt_init_floor="dt initialisation",
        hidden_dropout="dropout", **{k: v for k, v in _SSM_WHY.items() if k not in ("mamba_expand",)}),
})

# --- Linear-attention families (issue #18): Gated DeltaNet (qwen3_next, qwen3_5, qwen3_5_moe,
# olmo_hybrid), Kimi Delta Attention beside MLA (kimi_linear), lightning beside softmax (minimax).
# Their mappers are in hf/families/linear.py; the refused bailing_hybrid is in hf.OUT_OF_REACH.
_GDN = "linear_conv_kernel_dim linear_key_head_dim linear_num_key_heads linear_num_value_heads linear_value_head_dim"
_GDN_WHY = dict(
    layer_types="which layers are Gated DeltaNet (linear_attention) and which gated softmax attention (full_attention)",
    linear_num_key_heads="h_lk (query/key heads of the Gated DeltaNet)", linear_num_value_heads="h_lv",
    linear_key_head_dim="d_lk", linear_value_head_dim="d_lv", linear_conv_kernel_dim="K_c (the short convolution)",
    head_dim="d_h of the full-attention layers (the class default is a fixed 256: state it)",
    full_attention_interval="absent layer_types: layer i is full attention iff (i+1) % it == 0 (default 4)",
    attn_output_gate="published key, not read: checked true (q_proj always also gives the output gate)",
    mtp_num_hidden_layers=_MTP_USED + " (one module; more than 1 layer in it is refused)",
    mtp_use_dedicated_embeddings="multi-token prediction: not built by the causal LM")
_QWEN_MOE = dict(num_experts="E", moe_intermediate_size="m_e",
                 shared_expert_intermediate_size="m_s of the one shared expert (with its d x 1 sigmoid gate)")
_WRAPPER_IDS = dict(image_token_id="token id", video_token_id="token id", vision_start_token_id="token id",
                    vision_end_token_id="token id")
_QWEN3_5_WRAPPER = dict(
    used="text_config tie_word_embeddings",
    ignored="image_token_id video_token_id vision_config vision_end_token_id vision_start_token_id",
    vision_config="the vision tower: not part of the text decoder costed here",
    text_config="the decoder that is costed (read as its text family)",
    tie_word_embeddings="whether the LM head is tied (the wrapper's flag decides; default false)", **_WRAPPER_IDS)
TABLES.update({
    "qwen3_next": family(
        used=DENSE + " decoder_sparse_step head_dim layer_types mlp_only_layers moe_intermediate_size num_experts "
                     "num_experts_per_tok shared_expert_intermediate_size " + _GDN,
        ignored=BASE + " attention_bias norm_topk_prob " + ROUTER,
        extra_used="full_attention_interval mtp_num_hidden_layers", extra_ignored="mtp_use_dedicated_embeddings",
        intermediate_size="m of the dense layers (mlp_only_layers, decoder_sparse_step)",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", **_QWEN_MOE, **_GDN_WHY),
    "qwen3_5_text": family(
        used=DENSE + " head_dim layer_types " + _GDN, ignored=BASE + " attention_bias",
        extra_used="full_attention_interval attn_output_gate mtp_num_hidden_layers",
        extra_ignored="mtp_use_dedicated_embeddings mrope_section mrope_interleaved",
        intermediate_size="m of every layer's dense SwiGLU", mrope_section="multimodal RoPE sections: elementwise",
        mrope_interleaved="multimodal RoPE layout: elementwise", **_GDN_WHY),
    "qwen3_5_moe_text": family(
        used=DENSE.replace("intermediate_size ", "") + " head_dim layer_types moe_intermediate_size num_experts "
             "num_experts_per_tok shared_expert_intermediate_size " + _GDN,
        ignored=BASE + " attention_bias " + ROUTER,
        extra_used="full_attention_interval attn_output_gate mtp_num_hidden_layers",
        extra_ignored="mtp_use_dedicated_embeddings mrope_section mrope_interleaved norm_topk_prob",
        mrope_section="multimodal RoPE sections: elementwise", mrope_interleaved="multimodal RoPE layout: elementwise",
        norm_topk_prob="not read: routing weights, elementwise", **_QWEN_MOE, **_GDN_WHY),
    "qwen3_5": family(**_QWEN3_5_WRAPPER)._replace(decoder="qwen3_5_text"),
    "qwen3_5_moe": family(**_QWEN3_5_WRAPPER)._replace(decoder="qwen3_5_moe_text"),
    "olmo_hybrid": family(
        used=DENSE + " layer_types " + _GDN,
        ignored=BASE + " attention_bias linear_a_log_max linear_a_log_min linear_allow_neg_eigval "
                       "linear_dt_init_floor linear_dt_max linear_dt_min",
        extra_used="head_dim", intermediate_size="m of every layer's dense SwiGLU",
        linear_a_log_min="decay initialisation", linear_a_log_max="decay initialisation",
        linear_dt_min="time-step initialisation", linear_dt_max="time-step initialisation",
        linear_dt_init_floor="time-step initialisation", linear_allow_neg_eigval="beta scaled by 2: elementwise",
        **{**_GDN_WHY, "head_dim": HEAD_DIM_READ, "layer_types": "which layers are Gated DeltaNet (linear_attention) and which softmax "
                                      "attention (full_attention; absent: every 4th, i % 4 == 3)",
           "linear_num_key_heads": "h_lk (null: num_attention_heads)",
           "linear_num_value_heads": "h_lv (null: num_attention_heads)",
           "linear_key_head_dim": "d_lk (null: int(0.75 hidden_size / h_lk))",
           "linear_value_head_dim": "d_lv (null: 2 d_lk)"}),
    "kimi_linear": family(
        used="hidden_size intermediate_size kv_lora_rank layer_types linear_conv_kernel_dim linear_head_dim "
             "linear_num_heads mlp_layer_types moe_intermediate_size num_attention_heads num_experts "
             "num_experts_per_token num_hidden_layers num_key_value_heads num_shared_experts q_lora_rank "
             "qk_head_dim qk_nope_head_dim qk_rope_head_dim tie_word_embeddings v_head_dim vocab_size",
        ignored=BASE.replace("max_position_embeddings ", "").replace(" rope_parameters", "") + " attention_bias "
                "head_dim model_max_length moe_renormalize num_expert_group pretraining_tp routed_scaling_factor "
                "topk_group output_router_logits",
        extra_used="linear_attn_config first_k_dense_replace moe_layer_freq",
        extra_ignored="mla_use_nope moe_router_activation_func use_grouped_topk num_nextn_predict_layers",
        aliases={"max_position_embeddings": "model_max_length", "norm_topk_prob": "moe_renormalize",
                 "n_group": "num_expert_group", "num_local_experts": "num_experts",
                 "num_experts_per_tok": "num_experts_per_token", "n_shared_experts": "num_shared_experts"},
        head_dim="not read: __post_init__ sets it to qk_rope_head_dim (the checkpoint's value is ignored)",
        num_key_value_heads="checked equal to num_attention_heads: MLA gives each head its own K and V",
        qk_head_dim="checked: qk_nope_head_dim + qk_rope_head_dim", q_lora_rank="r_q (null: no Q LoRA)",
        kv_lora_rank="r_kv", qk_nope_head_dim="d_nope", qk_rope_head_dim="d_rope", v_head_dim="d_v",
        intermediate_size="m of the dense layers", num_experts="E", num_experts_per_token="k",
        num_shared_experts="E_s shared experts of width m_e (no gate)",
        layer_types="which layers are KDA (linear_attention) and which MLA (full_attention); absent: from "
                    "linear_attn_config's 1-based lists, else layer i > 0 with i % 4 == 0 is MLA",
        mlp_layer_types="which layers are dense and which MoE (sparse); absent: layers below first_k_dense_replace dense",
        linear_num_heads="h_lv (linear_attn_config.num_heads wins)", linear_head_dim="d_lk = d_lv (linear_attn_config.head_dim wins)",
        linear_conv_kernel_dim="K_c (linear_attn_config.short_conv_kernel_size wins)",
        linear_attn_config="the checkpoint's KDA settings, each in the linear_attn_config table",
        first_k_dense_replace="absent mlp_layer_types: layers below it (default 1) are dense, the rest MoE",
        moe_layer_freq="checked: must be 1 (5.23 never reads it)", model_max_length="position range: no matmul shape",
        moe_renormalize="routing weights: elementwise", num_expert_group="routing group selection: no matmul",
        mla_use_nope="no RoPE on the MLA layers (5.23 applies none): elementwise either way",
        moe_router_activation_func="routing score: elementwise", use_grouped_topk="routing selection: no matmul",
        num_nextn_predict_layers="multi-token prediction: not built by the causal LM"),
    "minimax": family(
        used=DENSE + " block_size head_dim layer_types num_experts_per_tok num_local_experts sliding_window",
        ignored=BASE + " full_attn_alpha_factor full_attn_beta_factor linear_attn_alpha_factor linear_attn_beta_factor "
                       "mlp_alpha_factor mlp_beta_factor router_jitter_noise " + ROUTER,
        extra_used="attn_type_list", aliases={"num_experts": "num_local_experts"},
        head_dim="d_h (null: hidden_size // heads), of both the lightning and the softmax layers",
        block_size="Q_c: the lightning attention's block",
        layer_types="which layers are lightning attention (linear_attention) and which softmax (full_attention); "
                    "absent: the even layers full",
        attn_type_list="the remote-code layer list (0 lightning, 1 softmax), not read by 5.23: checked to agree with layer_types",
        intermediate_size="m_e, the expert width (every layer MoE, no shared expert)", num_local_experts="E",
        sliding_window="W of every softmax layer (null: no window)",
        **{k: "residual scaling: elementwise" for k in ("full_attn_alpha_factor", "full_attn_beta_factor",
                                                        "linear_attn_alpha_factor", "linear_attn_beta_factor",
                                                        "mlp_alpha_factor", "mlp_beta_factor")}),
})
# Kimi Linear's checkpoint dict linear_attn_config: not a configuration class (its __post_init__
# reads these keys from the kwarg), so held by tests/test_hf_linear_families.py, not by the class test.
KIMI_LINEAR_ATTN_CONFIG = family(
    used="full_attn_layers kda_layers num_heads head_dim short_conv_kernel_size", ignored="",
    full_attn_layers="1-based numbers of the MLA layers", kda_layers="1-based numbers of the KDA layers",
    num_heads="h_lv", head_dim="d_lk = d_lv", short_conv_kernel_size="K_c")

# --- Sparse-attention families (issue #19): DeepSeek Sparse Attention, MLA with a lightning indexer
# that selects each query's top index_topk keys: deepseek_v32 (DeepSeek-V3.2) and glm_moe_dsa (GLM-5).
# Their mapper is hf/families/sparse.py. 5.23's classes keep DeepSeek-V3's MLA and MoE keys (less
# rope_interleave, pretraining_tp and num_nextn_predict_layers, which published files still carry).
_DSA_USED = ("first_k_dense_replace hidden_size index_head_dim index_n_heads index_topk intermediate_size kv_lora_rank "
             "layer_types mlp_layer_types moe_intermediate_size n_routed_experts n_shared_experts num_attention_heads "
             "num_experts_per_tok num_hidden_layers num_key_value_heads q_lora_rank qk_head_dim qk_nope_head_dim "
             "qk_rope_head_dim tie_word_embeddings v_head_dim vocab_size")
_DSA_IGNORED = BASE + " attention_bias head_dim mlp_bias n_group norm_topk_prob routed_scaling_factor topk_group " \
                      "output_router_logits"
_DSA_EXTRA_IGNORED = "aux_loss_alpha ep_size pretraining_tp rope_interleave scoring_func seq_aux topk_method"
_DSA = dict(
    _DEEPSEEK,
    q_lora_rank="r_q: must be a number (5.23's DSA attention always builds the query LoRA, and the indexer's "
                "wq_b reads its latent)",
    index_n_heads="h_I, the indexer's heads (wq_b: r_q -> h_I d_I; weights_proj: d -> h_I)",
    index_head_dim="d_I, the indexer's head width and its cached key per token (wk: d -> d_I)",
    index_topk="k_I, the keys each query's attention selects",
    layer_types="checked: every layer indexed_attention (5.23 runs no other kind)",
    mlp_layer_types="which layers are dense and which MoE (sparse); absent: layers below first_k_dense_replace dense",
    first_k_dense_replace="absent mlp_layer_types: layers below it (default 3) are dense, the rest MoE",
    pretraining_tp="not read by the modelling code",
    rope_interleave="not read: 5.23's MLA always interleaves its RoPE (elementwise)",
    num_nextn_predict_layers=_MTP_USED + " (5.23 drops the checkpoint's extra layer on load)",
)
TABLES.update({
    "deepseek_v32": family(
        used=_DSA_USED, ignored=_DSA_IGNORED, extra_used="moe_layer_freq num_nextn_predict_layers", extra_ignored=_DSA_EXTRA_IGNORED,
        aliases={"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts"}, **_DSA),
    "glm_moe_dsa": family(
        used=_DSA_USED + " indexer_types", ignored=_DSA_IGNORED,
        extra_used="moe_layer_freq index_topk_freq index_skip_topk_offset index_topk_pattern num_nextn_predict_layers",
        extra_ignored=_DSA_EXTRA_IGNORED + " indexer_rope_interleave index_share_for_mtp_iteration moe_router_dtype",
        aliases={"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts"},
        indexer_types="checked: every layer full (a shared layer reuses another layer's top-k without an indexer "
                      "of its own, a block kind costcalc does not model)",
        index_topk_freq="absent indexer_types: layer i runs its indexer iff max(i - offset + 1, 0) % freq == 0 "
                        "(checked: every layer must)",
        index_skip_topk_offset="absent indexer_types: the offset of that rule (default 2)",
        index_topk_pattern="absent indexer_types: the layers' F (full) / S (shared) string, before the rule",
        indexer_rope_interleave="not read: glm_moe_dsa's indexer always interleaves its RoPE (elementwise)",
        index_share_for_mtp_iteration="multi-token prediction: not built by the causal LM",
        moe_router_dtype="router precision: same matmul", **_DSA),
})

# --- Gemma 4 (issue #19): the gemma4 wrapper and its gemma4_text decoder (hf/families/gemma4.py) ------
_GEMMA4_IGNORED = (BASE.replace("hidden_act", "hidden_activation") + " attention_bias final_logit_softcapping "
                   "use_double_wide_mlp vocab_size_per_layer_input")
TABLES.update({
    "gemma4_text": family(
        tied=True,
        used=DENSE + " attention_k_eq_v enable_moe_block head_dim hidden_size_per_layer_input layer_types "
                     "moe_intermediate_size num_experts num_kv_shared_layers per_layer_config sliding_window "
                     "top_k_experts use_bidirectional_attention",
        ignored=_GEMMA4_IGNORED,
        extra_used="global_head_dim num_global_key_value_heads expert_intermediate_size",
        head_dim="d_h of the sliding layers (and of any layer per_layer_config leaves alone)",
        num_key_value_heads="h_kv of the sliding layers (and of any layer per_layer_config leaves alone)",
        intermediate_size="m of every layer's GeGLU MLP (with enable_moe_block: m_s, the MLP beside the experts)",
        layer_types="sliding_attention (window) or full_attention per layer (absent: every sixth full); 5.23 "
                    "forces the last layer full",
        sliding_window="W of the sliding layers",
        per_layer_config="per-layer head_dim / num_key_value_heads (5.23 derives it from global_head_dim and "
                         "num_global_key_value_heads where absent; any other key is refused)",
        global_head_dim="d_h of the full layers (absent per_layer_config: __post_init__ pops it into the overrides)",
        num_global_key_value_heads="h_kv of the full layers, with attention_k_eq_v only (popped into the overrides)",
        attention_k_eq_v="the full layers build no v_proj: the key projection gives the values (-keqv)",
        enable_moe_block="every layer: router and top_k_experts routed experts beside the dense MLP (moe_shared)",
        num_experts="E", top_k_experts="k", moe_intermediate_size="m_e, each expert's GeGLU width",
        expert_intermediate_size="a published duplicate of moe_intermediate_size (not read by 5.23): checked equal",
        hidden_size_per_layer_input="checked 0: per-layer embeddings (class default 256) are refused",
        num_kv_shared_layers="checked 0: layers reusing another layer's keys and values are refused",
        use_bidirectional_attention="checked null or 'vision' (text tokens causal); 'all' is refused",
        use_double_wide_mlp="doubles the MLP of KV-shared layers only, which are refused",
        vocab_size_per_layer_input="rows of the per-layer embedding table (refused where it exists)",
        tie_word_embeddings="tied_embeddings of a text-only model (under the gemma4 wrapper the wrapper's flag)"),
    "gemma4": family(
        tied=True,
        used="text_config tie_word_embeddings",
        ignored="audio_config audio_token_id boa_token_id boi_token_id eoa_token_index eoi_token_id image_token_id "
                "initializer_range video_token_id vision_config",
        extra_ignored="bos_token_id eos_token_id pad_token_id vision_soft_tokens_per_image eoa_token_id",
        text_config="the decoder that is costed (read as gemma4_text)",
        tie_word_embeddings="whether the LM head is tied (the wrapper's flag decides; default true)",
        vision_config="the vision tower: not part of the text decoder costed here",
        audio_config="the audio tower: not part of the text decoder costed here",
        vision_soft_tokens_per_image="image tokens per image: a prompt length, not a size",
        **{k: "token id" for k in ("audio_token_id", "boa_token_id", "boi_token_id", "eoa_token_index",
                                   "eoi_token_id", "image_token_id", "video_token_id", "eoa_token_id")},
        initializer_range="initialisation")._replace(decoder="gemma4_text"),
})

# --- Llama-Nemotron NAS (issue #19): DeciLM remote code, not in transformers 5.23 (hf/families/nas.py).
# Its keys are LlamaConfig's plus block_configs; with no configuration class to hold the table
# against, tests/test_hf_nas.py holds it against the published file.
TABLES.update({
    "nemotron-nas": family(
        used="block_configs hidden_size head_dim intermediate_size num_attention_heads num_hidden_layers "
             "num_key_value_heads tie_word_embeddings vocab_size",
        ignored=BASE + " attention_bias mlp_bias pretraining_tp",
        block_configs="per layer: attention (n_heads_in_group -> h_kv, or no_op) and ffn (ffn_mult -> m, or no_op)",
        head_dim="d_h (absent: hidden_size // num_attention_heads, as Llama's attention reads it)",
        intermediate_size="checked null: block_configs give each layer its width",
        num_key_value_heads="checked null: block_configs give each layer its key/value heads",
        attention_bias="biases: not counted", mlp_bias="biases: not counted"),
})
# A block's two parts (DeciLM's AttentionConfig and FFNConfig as the published files write them).
NEMOTRON_NAS_BLOCK = {
    "attention": family(
        used="n_heads_in_group no_op replace_with_linear",
        ignored="num_sink_tokens sparsify unshifted_sink use_prefill_window_in_sink_attention window_length",
        n_heads_in_group="query heads per key/value head: h_kv = num_attention_heads // it",
        no_op="no attention in the layer (a none mixer)",
        replace_with_linear="checked false: a hidden x hidden linear instead is refused",
        num_sink_tokens="checked null (sink attention is refused)", sparsify="checked null",
        unshifted_sink="checked false", use_prefill_window_in_sink_attention="checked false",
        window_length="checked null (a DeciLM attention window is refused)"),
    "ffn": family(
        used="ffn_mult no_op replace_with_linear", ignored="sparsify",
        ffn_mult="m = int(2 ffn_mult hidden_size / 3) rounded up to a multiple of 256 (DeciLM)",
        no_op="no FFN in the layer", replace_with_linear="checked false: a hidden x hidden linear instead is refused",
        sparsify="checked null"),
}
# Families whose attention needs the GQA head features (costcalc/blocks.py: dv, head_gate): MiMo-V2-Flash's
# narrower value heads (hf/families/heads.py).
TABLES.update({
    "mimo_v2_flash": family(
        used="hidden_size intermediate_size num_attention_heads num_hidden_layers num_key_value_heads "
             "tie_word_embeddings vocab_size head_dim v_head_dim sliding_window layer_types mlp_layer_types "
             "moe_intermediate_size n_routed_experts num_experts_per_tok",
        ignored=BASE + " attention_bias attention_value_scale n_group norm_topk_prob output_router_logits "
                       "routed_scaling_factor topk_group",
        extra_used="sliding_window_size swa_num_attention_heads swa_num_key_value_heads swa_head_dim swa_v_head_dim "
                   "hybrid_layer_pattern moe_layer_freq n_shared_experts hybrid_block_size num_nextn_predict_layers",
        extra_ignored="add_swa_attention_sink_bias add_full_attention_sink_bias swa_rope_theta layernorm_epsilon "
                      "scoring_func topk_method attention_chunk_size mlp_bias use_qk_norm hidden_dropout",
        aliases={"num_local_experts": "n_routed_experts"},
        num_attention_heads="h_q on every layer", num_key_value_heads="h_kv of the full layers (twice it on the "
                                                                      "sliding ones: 5.23 doubles it there)",
        head_dim="d_h of queries and keys (class default 192, the example model's: must be stated)",
        v_head_dim="d_v of values: v_proj h_kv d_v, o_proj h_q d_v (class default 128: must be stated)",
        sliding_window="W of the sliding layers (a sliding_window_size wins: 5.23 sets W to it + 1)",
        layer_types="which layers are windowed; absent: layer 0 and every 6th (i+1) full, the rest sliding",
        mlp_layer_types="dense or sparse (MoE) per layer; absent: layer 0 dense, the rest MoE",
        n_routed_experts="E", intermediate_size="m of the dense layers",
        attention_value_scale="a scale on the values: elementwise",
        sliding_window_size="the reference's window before the query: 5.23 sets sliding_window to it + 1",
        swa_num_attention_heads="not read (5.23 builds num_attention_heads on every layer): must equal it",
        swa_num_key_value_heads="not read (5.23 builds 2 x num_key_value_heads on the sliding layers): must equal it",
        swa_head_dim="not read (5.23 builds head_dim on every layer): must equal it",
        swa_v_head_dim="not read (5.23 builds v_head_dim on every layer): must equal it",
        hybrid_layer_pattern="not read (5.23 derives layer_types): 0 full / 1 sliding per layer, must agree",
        moe_layer_freq="not read (5.23 derives mlp_layer_types): 0 dense / 1 MoE per layer, must agree",
        n_shared_experts="not read (5.23 builds no shared expert): must be null or 0",
        hybrid_block_size="not read by 5.23: must be null",
        add_swa_attention_sink_bias="attention sinks (5.23 builds them on the sliding layers): an extra softmax "
                                    "column, elementwise",
        add_full_attention_sink_bias="attention sinks: an extra softmax column, elementwise (5.23 builds none "
                                     "on the full layers)",
        swa_rope_theta="RoPE base of the sliding layers: elementwise", layernorm_epsilon="norm epsilon",
        scoring_func="routing score (sigmoid): elementwise", topk_method="routing selection: no matmul",
        attention_chunk_size="not read by 5.23's modelling code", mlp_bias="MLP biases: not counted",
        use_qk_norm="not read (5.23 builds no QK norm): a norm is not a matmul anyway",
        num_nextn_predict_layers="MTP modules (model.mtp, which 5.23 drops on load), as vLLM's and SGLang's "
                                 "MiMoV2FlashMTPBlock build them: eh_proj 2d -> d, a sliding layer of the swa_* "
                                 "sizes with a dense SwiGLU of intermediate_size; counted apart (mtp_params) and "
                                 "run by --draft mtp"),
})
# Step-3.7-Flash (step3p7): a multimodal wrapper whose text decoder is step3p5 (Step3p7TextConfig's
# model_type), GQA with a per-head output gate on every layer (hf/families/heads.py).
TABLES.update({
    "step3p5": family(
        used="hidden_size intermediate_size num_attention_heads num_hidden_layers num_key_value_heads "
             "tie_word_embeddings vocab_size head_dim sliding_window layer_types mlp_layer_types moe_intermediate_size "
             "n_routed_experts num_experts_per_tok share_expert_dim num_sliding_attention_heads per_layer_config "
             "num_nextn_predict_layers mtp_layer_types mtp_mlp_layer_types",
        ignored=BASE + " attention_bias mlp_bias moe_router_scaling_factor output_router_logits query_pre_attn_scalar "
                       "swiglu_limits swiglu_limits_shared",
        extra_used="attention_other_setting moe_layers_enum moe_layer_freq use_head_wise_attn_gate gating att_impl_type "
                   "use_bidirectional_attention sparse_attention_config use_moe",
        extra_ignored="moe_layer_offset moe_every_n_layer moe_router_activation use_moe_router_bias need_fp32_gate "
                      "norm_expert_weight use_qk_norm yarn_only_types use_rope_layers zero_centered sink "
                      "partial_rotary_factors max_seq_len",
        aliases={"num_local_experts": "n_routed_experts", "num_attention_groups": "num_key_value_heads",
                 "moe_num_experts": "n_routed_experts", "moe_top_k": "num_experts_per_tok",
                 "share_expert_dims": "share_expert_dim", "num_mtp_layers": "num_nextn_predict_layers"},
        num_attention_heads="h_q of the full layers (and of the sliding ones without an override)",
        num_key_value_heads="h_kv on every layer (class default 8, the example model's: must be stated)",
        head_dim="d_h (class default 128: must be stated)", intermediate_size="m of the dense layers",
        sliding_window="W of the sliding layers (class default null: must be stated where a layer slides)",
        layer_types="which layers are windowed (MTP entries past num_hidden_layers dropped, as 5.23 does)",
        mlp_layer_types="dense or sparse (MoE) per layer; absent: moe_layers_enum, else layers >= 3 MoE",
        moe_intermediate_size="m_e", n_routed_experts="E", share_expert_dim="m_s of the one shared expert",
        num_sliding_attention_heads="h_q of the sliding layers (absent: attention_other_setting's)",
        per_layer_config="per-layer num_attention_heads (5.23 writes the sliding layers' here): read, nothing else",
        num_nextn_predict_layers="MTP modules (not built by the decoder; their trailing per-layer entries dropped): "
                                 "eh_proj 2d -> d and a Step-3.5 layer each, as vLLM's and SGLang's Step3p5MTP "
                                 "build them; counted apart (mtp_params) and run by --draft mtp",
        moe_router_scaling_factor="routing weights: elementwise", query_pre_attn_scalar="score scale",
        swiglu_limits="clamps of the experts' activations: elementwise",
        swiglu_limits_shared="clamps of the shared expert's activations: elementwise",
        mtp_layer_types="the MTP layers' attention kinds (absent: layer_types' trailing entries, else full)",
        mtp_mlp_layer_types="the MTP layers' FFN kinds (absent: mlp_layer_types' trailing entries, else "
                            "moe_layers_enum over the padded range)",
        attention_other_setting="the sliding layers' settings: num_attention_heads read (5.23 reads nothing "
                                "else: num_attention_groups and head_dim must equal the global ones)",
        moe_layers_enum="absent mlp_layer_types: the MoE layers' indices (a list or a comma-separated string)",
        moe_layer_freq="not read by 5.23 (mlp_layer_types is derived first): 0/1 per layer, must agree",
        use_head_wise_attn_gate="must be true: 5.23 always builds the per-head gate g_proj (gating)",
        gating="the output gate: true or per-head (g_proj hidden_size -> heads); another is not modelled",
        att_impl_type="must be GQA (what 5.23 builds)", use_moe="not read by 5.23: must be true where a layer is MoE",
        use_bidirectional_attention="must be false: a non-causal decoder is not modelled",
        sparse_attention_config="not read by 5.23 (layer_types is derived first): sparse layers there are refused",
        moe_layer_offset="not read by 5.23 (moe_layers_enum decides)",
        moe_every_n_layer="not read by 5.23 (moe_layers_enum decides)",
        moe_router_activation="routing score: elementwise", use_moe_router_bias="routing bias: no matmul",
        need_fp32_gate="router precision: same matmul", norm_expert_weight="routing weights: elementwise",
        use_qk_norm="QK norm: not a matmul", yarn_only_types="RoPE scaling per layer type: elementwise",
        use_rope_layers="RoPE per layer: elementwise", zero_centered="norm parameterisation",
        sink="attention sinks: elementwise", partial_rotary_factors="RoPE fraction per layer: elementwise",
        max_seq_len="position range: no matmul shape"),
    "step3p7": family(
        used="text_config", ignored="image_token_id projector_bias vision_config",
        text_config="the decoder that is costed (read as step3p5)", image_token_id="token id",
        projector_bias="the vision projector's bias: not part of the text decoder",
        vision_config="the vision tower and its projector: not part of the text decoder costed here")._replace(
        decoder="step3p5"),
})
# MiniMax-M3 (minimax_m3_vl): a multimodal wrapper whose text decoder minimax_m3_vl_text is GQA with a fused
# SwiGLU-OAI MLP or MoE with a shared expert; its minimax_m3_sparse layers (a GQA lightning indexer) are refused.
TABLES.update({
    "minimax_m3_vl_text": family(
        used="hidden_size num_attention_heads num_hidden_layers num_key_value_heads tie_word_embeddings vocab_size "
             "head_dim layer_types mlp_layer_types intermediate_size dense_intermediate_size shared_intermediate_size "
             "num_local_experts num_experts_per_tok",
        ignored=BASE + " output_router_logits router_aux_loss_coef router_jitter_noise routed_scaling_factor "
                       "rotary_dim swiglu_alpha swiglu_limit index_block_size index_head_dim index_local_blocks "
                       "index_n_heads index_topk_blocks",
        extra_used="sparse_attention_config moe_layer_freq", aliases={"num_experts": "num_local_experts"},
        num_key_value_heads="h_kv (class default 4, the example model's: must be stated)",
        head_dim="d_h (class default 128: must be stated)", intermediate_size="m_e, the experts' width",
        dense_intermediate_size="m of the dense layers (gate_up_proj d x 2m, down_proj)",
        shared_intermediate_size="m_s of the one shared expert of every MoE layer",
        num_local_experts="E", layer_types="full_attention, or minimax_m3_sparse (refused: a GQA lightning indexer)",
        mlp_layer_types="dense or sparse (MoE) per layer; absent: moe_layer_freq, else every layer MoE",
        routed_scaling_factor="routing weights: elementwise", rotary_dim="RoPE width: elementwise",
        swiglu_alpha="activation: elementwise", swiglu_limit="activation clamp: elementwise",
        index_block_size="the sparse layers' indexer (refused where a layer has one)",
        index_head_dim="the sparse layers' indexer (refused where a layer has one)",
        index_local_blocks="the sparse layers' indexer (refused where a layer has one)",
        index_n_heads="the sparse layers' indexer (refused where a layer has one)",
        index_topk_blocks="the sparse layers' indexer (refused where a layer has one)",
        sparse_attention_config="absent layer_types: sparse_attention_freq marks the sparse layers (refused)",
        moe_layer_freq="absent mlp_layer_types: 0 dense / 1 MoE per layer"),
    "minimax_m3_vl": family(
        used="text_config tie_word_embeddings", ignored="image_token_index video_token_index vision_config "
                                                        "projector_hidden_size merged_hidden_size",
        aliases={"image_token_id": "image_token_index", "video_token_id": "video_token_index"},
        text_config="the decoder that is costed (read as minimax_m3_vl_text)",
        tie_word_embeddings="whether the LM head is tied (false: the text config's flag decides, as 5.23's "
                            "__post_init__ does)",
        image_token_index="token id", video_token_index="token id",
        vision_config="the vision tower: not part of the text decoder costed here",
        projector_hidden_size="the vision projector: not part of the text decoder",
        merged_hidden_size="the vision projector's input width (derived): not part of the text decoder")._replace(
        decoder="minimax_m3_vl_text"),
})
# --- DeepSeek-V4 (issue #19): sliding-window, heavily compressed and compressed sparse attention with one
# K=V head, a grouped output LoRA, hyper-connections, hash-routed first layers. Mapper: hf/families/v4.py.
_V4_USED = ("compress_rates hc_mult head_dim hidden_size index_head_dim index_n_heads index_topk layer_types "
            "mlp_layer_types moe_intermediate_size n_routed_experts num_attention_heads num_experts_per_tok "
            "num_hidden_layers num_key_value_heads o_groups o_lora_rank q_lora_rank sliding_window "
            "tie_word_embeddings vocab_size")
_V4_IGNORED = (BASE + " attention_bias compress_rope_theta hc_eps hc_sinkhorn_iters mlp_bias n_shared_experts "
               "norm_topk_prob num_nextn_predict_layers partial_rotary_factor qk_rope_head_dim rope_theta "
               "routed_scaling_factor scoring_func swiglu_limit " + ROUTER + " router_jitter_noise")
TABLES["deepseek_v4"] = family(
    used=_V4_USED, ignored=_V4_IGNORED,
    extra_used="compress_ratios compress_rate_csa compress_rate_hca num_hash_layers expert_dtype",
    extra_ignored="topk_method dspark_block_size dspark_noise_token_id dspark_target_layer_ids "
                  "dspark_markov_rank",
    aliases={"num_local_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size"},
    compress_rates="R_c of each compressed kind (default 4 for compressed_sparse_attention, 128 for "
                   "heavily_compressed_attention)",
    hc_mult="n_hc, the hyper-connection streams (the fn projections, the comb mix, the head)",
    head_dim="d_h, every query head's and the one K=V head's width", q_lora_rank="r_q (q_a_proj, q_b_proj, the indexer's q_b_proj)",
    index_head_dim="d_I, the indexer's head width and its compressed index keys",
    index_n_heads="h_I, the indexer's query heads", index_topk="k_I, the compressed entries each query keeps",
    layer_types="each layer's attention: sliding_attention, heavily_compressed_attention or "
                "compressed_sparse_attention (the source of truth)",
    mlp_layer_types="checked: hash_moe or moe per layer (hash layers run the router matmul too: the same cost)",
    n_routed_experts="E", num_key_value_heads="checked: 1 (5.23 builds one K=V head whatever it says)",
    o_groups="G_o, the grouped output projection's head groups", o_lora_rank="r_o, each group's rank",
    sliding_window="W, every layer's window",
    moe_intermediate_size="m_e, and the one shared expert's width (5.23's DeepseekV4MLP reads it)",
    n_shared_experts="not read: 5.23 builds one shared SwiGLU of moe_intermediate_size",
    compress_rope_theta="RoPE base of the compressed layers: elementwise", hc_eps="Sinkhorn floor: elementwise",
    hc_sinkhorn_iters="Sinkhorn iterations of the comb weights: elementwise",
    num_nextn_predict_layers="multi-token prediction, not built by 5.23's causal LM (which drops mtp.*): "
                             "e_proj and h_proj over the hyper-connection streams and an own hc_head, not "
                             "costcalc's eh_proj module (docs/hf-import.md, 'MTP layers')",
    partial_rotary_factor="RoPE fraction: elementwise", qk_rope_head_dim="RoPE width (legacy, read as "
                                                                         "partial_rotary_factor): elementwise",
    rope_theta="RoPE base of the sliding layers: elementwise", scoring_func="routing score: elementwise",
    swiglu_limit="SwiGLU clamp: elementwise",
    compress_ratios="legacy per-layer kinds (0 sliding, 4 compressed sparse, 128 heavily compressed; "
                    "entries past num_hidden_layers dropped), read where layer_types is absent",
    compress_rate_csa="legacy rate of compressed_sparse_attention (folded into compress_rates)",
    compress_rate_hca="legacy rate of heavily_compressed_attention (folded into compress_rates)",
    num_hash_layers="checked: the first layers hash-routed (absent mlp_layer_types; same cost as routed)",
    expert_dtype="the routed experts' weight format (fp4: fp4-block1x32), moved into quantization_config as "
                 "5.23 moves it (hf/quant.py): bytes, not FLOPs",
    topk_method="expert selection: no matmul",
    dspark_block_size="DSpark speculative module: not built by 5.23's causal LM",
    dspark_noise_token_id="DSpark speculative module: not built by 5.23's causal LM",
    dspark_target_layer_ids="DSpark speculative module: not built by 5.23's causal LM",
    dspark_markov_rank="DSpark speculative module: not built by 5.23's causal LM")
# --- Frontier MoE families and multimodal text decoders (issue #19): minimax_m2 (MiniMax-M2/M2.5/M2.7),
# the Qwen3-VL wrappers and their text decoders, and the Kimi-K2.5 wrapper (its text_config is read as
# deepseek_v3, whose table above also reads the remote-code kimi_k2 configs: hf.REMOTE_CODE). Mappers:
# hf/families/frontier.py.
_MINIMAX_M2 = dict(
    head_dim="d_h: must be a number (the class default 128 is the example model's; 5.23 cannot build with null)",
    num_key_value_heads="h_kv (the class default 8 is the example model's: state it)",
    intermediate_size="m_e, the expert width (every layer MoE, no shared expert, no dense layer)",
    num_local_experts="E", router_jitter_noise="training noise",
    attn_type_list="remote-code layer kinds, not read by 5.23: checked all 1 (softmax attention on every layer)",
    shared_intermediate_size="remote-code shared expert width, not read by 5.23: checked 0 (none is built)",
    mlp_intermediate_size="not read by 5.23 nor by the remote code's layers: no dense MLP is built",
    rotary_dim="legacy RoPE width (the class folds it into partial_rotary_factor): elementwise",
    use_qk_norm="QK RMSNorm over all heads: vectors, no product (5.23 always builds it)",
    qk_norm_type="QK norm layout (per_layer): vectors, no product", scoring_func="routing score: elementwise",
    use_routing_bias="expert selection bias (a buffer): elementwise", shared_moe_mode="shared-expert gate kind "
    "(none is built: shared_intermediate_size is 0)",
    use_mtp="multi-token prediction: not built by the causal LM",
    num_mtp_modules="multi-token prediction: not built by the causal LM",
    mtp_transformer_layers="multi-token prediction: not built by the causal LM",
    sliding_window="remote-code window, not read by 5.23's minimax_m2 (null in the published files)",
    swa_rope_theta="RoPE base of windowed layers: elementwise",
    **{k: "residual scaling: elementwise" for k in ("layernorm_full_attention_beta", "layernorm_linear_attention_beta",
                                                    "layernorm_mlp_beta")})
_MROPE = dict(mrope_section="multimodal RoPE sections: elementwise", mrope_interleaved="multimodal RoPE layout: elementwise")
_VL_TEXT_EXTRA = dict(
    tie_word_embeddings="not read from the text_config: the wrapper's flag ties the LM head",
    head_dim="d_h: must be a number (the class default 128 is the example model's)",
    num_key_value_heads="h_kv (the class default is a fixed number: state it; null: num_attention_heads)")
TABLES.update({
    "minimax_m2": family(
        used=DENSE + " head_dim num_experts_per_tok num_local_experts",
        ignored=BASE + " router_jitter_noise " + ROUTER,
        extra_used="attn_type_list shared_intermediate_size",
        extra_ignored="mlp_intermediate_size rotary_dim use_qk_norm qk_norm_type scoring_func use_routing_bias "
                      "shared_moe_mode use_mtp num_mtp_modules mtp_transformer_layers sliding_window swa_rope_theta "
                      "layernorm_full_attention_beta layernorm_linear_attention_beta layernorm_mlp_beta",
        aliases={"num_experts": "num_local_experts"}, **_MINIMAX_M2),
    "qwen3_vl_text": family(
        used=DENSE.replace(" tie_word_embeddings", "") + " head_dim",
        ignored=BASE.replace("bos_token_id ", "").replace("eos_token_id ", "") + " attention_bias",
        extra_ignored="bos_token_id eos_token_id tie_word_embeddings " + " ".join(_MROPE),
        intermediate_size="m of every layer's SwiGLU", **_MROPE, **_VL_TEXT_EXTRA),
    "qwen3_vl_moe_text": family(
        tied=True,
        used=DENSE + " decoder_sparse_step head_dim mlp_only_layers moe_intermediate_size num_experts_per_tok "
                     "num_local_experts",
        ignored=BASE + " attention_bias sliding_window " + ROUTER,
        extra_ignored="norm_topk_prob " + " ".join(_MROPE), aliases={"num_experts": "num_local_experts"},
        intermediate_size="m of the dense layers (mlp_only_layers, decoder_sparse_step)",
        num_local_experts="E (written for the field num_experts)", norm_topk_prob="not read: routing weights, elementwise",
        decoder_sparse_step="layer i is MoE iff (i+1) % step == 0 and i not in mlp_only_layers",
        mlp_only_layers="layers forced dense", sliding_window="set to null by __post_init__: no window",
        **_MROPE, **{**_VL_TEXT_EXTRA, "head_dim": "d_h (null: hidden_size // heads)",
                     "tie_word_embeddings": "not read from the text_config: the wrapper's flag ties the LM head"}),
    "qwen3_vl": family(**_QWEN3_5_WRAPPER)._replace(decoder="qwen3_vl_text"),
    "qwen3_vl_moe": family(**_QWEN3_5_WRAPPER)._replace(decoder="qwen3_vl_moe_text"),
    "kimi_k25": family(
        tied=True,
        used="text_config tie_word_embeddings",
        ignored="image_token_id projection_hidden_size projection_layer_norm_eps video_token_id vision_config "
                "vision_end_token_id vision_start_token_id",
        extra_ignored="bos_token_id eos_token_id pad_token_id ignore_index media_placeholder_token_id "
                      "use_unified_vision_chunk video_placeholder",
        text_config="the decoder that is costed (read as deepseek_v3, as Kimi_K25Config reads a kimi_k2 text_config)",
        tie_word_embeddings="whether the LM head is tied (the wrapper's flag decides; default true)",
        vision_config="the vision tower (MoonViT): not part of the text decoder costed here",
        projection_hidden_size="the vision projector's width: not part of the text decoder",
        projection_layer_norm_eps="the vision projector's norm: not part of the text decoder",
        ignore_index="training label", media_placeholder_token_id="token id", video_placeholder="token text",
        use_unified_vision_chunk="vision preprocessing switch", **_WRAPPER_IDS)._replace(decoder="deepseek_v3"),
})
