"""The fields a Hugging Face config may carry, family by family, each used or ignored with its reason.

One table per family (``tables.py``): every key the family's transformers 5.x configuration
class defines -- its dataclass fields under the names ``save_pretrained`` writes, and the keys its
``__post_init__`` derives and writes -- is ``used`` (it changes a size or which layers are which)
or ``ignored`` (with the reason it changes no matmul). ``test_each_table_holds_its_configuration_class``
in ``tests/test_hf_transformers.py`` holds each table against the class itself when transformers
is installed. Besides the class's keys a family accepts ``extra`` keys: its attribute_map
aliases, legacy spellings its class still reads, and keys published configs carry that the class
does not define (each with its reason). ``COMMON`` are the keys of every config
(``PreTrainedConfig``'s own fields, the keys it always writes or consumes). Any other key is an
error: costcalc does not guess.
"""
from __future__ import annotations

from typing import NamedTuple

USED, IGNORED = "used", "ignored"


class Row(NamedTuple):
    role: str       # used | ignored
    reason: str


# Reasons shared by every family that has the key (a family's own reason overrides them).
SHARED = {
    "vocab_size": "V (embedding rows, LM-head columns)", "hidden_size": "d", "num_hidden_layers": "L",
    "num_attention_heads": "h_q", "num_key_value_heads": "h_kv (null -> num_attention_heads)",
    "head_dim": "d_h", "intermediate_size": "m, the dense FFN width", "moe_intermediate_size": "m_e",
    "num_experts_per_tok": "k", "tie_word_embeddings": "tied_embeddings (parameters only; FLOPs are the same)",
    "sliding_window": "W of the windowed layers", "layer_types": "which layers are windowed (the source of truth)",
    "hidden_act": "activation: elementwise", "hidden_activation": "activation: elementwise",
    "max_position_embeddings": "position range: no matmul shape", "original_max_position_embeddings": "RoPE scaling",
    "initializer_range": "initialisation", "rms_norm_eps": "norm epsilon", "layer_norm_eps": "norm epsilon",
    "norm_epsilon": "norm epsilon", "use_cache": "cache switch (the workloads say what is cached)",
    "pad_token_id": "token id", "bos_token_id": "token id", "eos_token_id": "token id",
    "rope_parameters": "RoPE: elementwise", "attention_bias": "attention biases: not counted",
    "mlp_bias": "MLP biases: not counted", "attention_dropout": "dropout", "hidden_dropout": "dropout",
    "resid_pdrop": "dropout", "embd_pdrop": "dropout", "residual_dropout": "dropout", "embedding_dropout": "dropout",
    "classifier_dropout": "dropout", "pretraining_tp": "not read by the modelling code",
    "output_router_logits": "router logits for a training loss", "router_aux_loss_coef": "training loss",
    "router_jitter_noise": "training noise", "input_jitter_noise": "training noise",
    "norm_topk_prob": "routing weights: elementwise", "routed_scaling_factor": "routing weights: elementwise",
    "n_group": "routing group selection: no matmul", "topk_group": "routing group selection: no matmul",
    "use_qk_norm": "QK norm: not a matmul", "attn_logit_softcapping": "score cap: elementwise",
    "final_logit_softcapping": "logit cap: elementwise", "query_pre_attn_scalar": "score scale",
    "rope_interleave": "RoPE element order", "use_bias": "biases: not counted",
    # legacy spellings and keys of published files, accepted by every family
    "rope_theta": "legacy RoPE base (folded into rope_parameters)",
    "rope_scaling": "legacy RoPE scaling (folded into rope_parameters)",
    "partial_rotary_factor": "legacy RoPE fraction (folded into rope_parameters): elementwise",
    "auto_map": "remote-code class map", "cache_implementation": "generation cache type",
}
# Fields most families' configuration classes share (the tables name them once).
BASE = ("attention_dropout bos_token_id eos_token_id hidden_act initializer_range max_position_embeddings "
        "pad_token_id rms_norm_eps rope_parameters use_cache")
DENSE = "hidden_size intermediate_size num_attention_heads num_hidden_layers num_key_value_heads tie_word_embeddings vocab_size"
ROUTER = "output_router_logits router_aux_loss_coef"
# The reason of a head_dim key on a family whose class has no such field but whose code reads it.
HEAD_DIM_READ = "d_h: not a field, but the modelling code reads a head_dim key (absent: hidden_size // heads)"

# Keys of every config: PreTrainedConfig's fields, what it writes or consumes on load.
_GENERATION = ("assistant_confidence_threshold assistant_lookbehind bad_words_ids begin_suppress_tokens "
               "diversity_penalty do_sample early_stopping encoder_no_repeat_ngram_size encoder_repetition_penalty "
               "epsilon_cutoff eta_cutoff exponential_decay_length_penalty forced_bos_token_id forced_eos_token_id "
               "length_penalty max_length min_length no_repeat_ngram_size num_assistant_tokens "
               "num_assistant_tokens_schedule num_beam_groups num_beams num_return_sequences output_scores "
               "remove_invalid_values repetition_penalty return_dict_in_generate suppress_tokens target_lookbehind "
               "temperature top_k top_p typical_p")
COMMON: dict[str, Row] = {
    **{k: Row(IGNORED, "generation setting, dropped on load") for k in _GENERATION.split()},
    "transformers_version": Row(IGNORED, "writer's version"), "architectures": Row(IGNORED, "class names"),
    "output_hidden_states": Row(IGNORED, "outputs"), "output_attentions": Row(IGNORED, "outputs"),
    "return_dict": Row(IGNORED, "outputs"), "dtype": Row(IGNORED, "weight dtype: FLOPs do not depend on it"),
    "torch_dtype": Row(IGNORED, "legacy name of dtype"), "chunk_size_feed_forward": Row(IGNORED, "same FFN work"),
    "is_encoder_decoder": Row(USED, "must be false: a decoder-only model"),
    "id2label": Row(IGNORED, "classification labels"), "label2id": Row(IGNORED, "classification labels"),
    "num_labels": Row(IGNORED, "classification labels"), "problem_type": Row(IGNORED, "classification loss"),
    "model_type": Row(USED, "the family"), "_name_or_path": Row(IGNORED, "checkpoint path"),
    "name_or_path": Row(IGNORED, "checkpoint path"), "_commit_hash": Row(IGNORED, "dropped on load"),
    "quantization_config": Row(USED, "weight formats by module (dtypes; hf/quant.py): bytes, not FLOPs"),
    "attn_implementation": Row(IGNORED, "kernel choice: the conventions say what is counted"),
    "experts_implementation": Row(IGNORED, "expert kernel choice: same matmuls"),
    "per_layer_config": Row(USED, "per-layer overrides: must be null or empty"),
    "torchscript": Row(IGNORED, "export flag"), "use_return_dict": Row(IGNORED, "outputs"),
    "task_specific_params": Row(IGNORED, "generation settings"), "unsloth_fixed": Row(IGNORED, "a tool's marker"),
}
_ACCEPTED_BY_ALL = ("rope_theta", "rope_scaling", "partial_rotary_factor", "auto_map")


class Table(NamedTuple):
    """A family's keys: ``rows`` are the configuration class's own, ``extra`` the others it accepts."""
    rows: dict[str, Row]
    extra: dict[str, Row]
    aliases: dict[str, str]       # attribute_map: alias -> the key it stands for
    tied: bool = False            # the class's default of tie_word_embeddings
    decoder: str = ""             # a multimodal wrapper: the family of its text_config, the decoder costed

    def known(self) -> dict[str, Row]:
        return {**COMMON, **self.extra, **self.rows}


def _rows(names: str, role: str, why: dict[str, str]) -> dict[str, Row]:
    out = {}
    for name in names.split():
        reason = why.get(name, SHARED.get(name))
        if reason is None:
            raise ValueError(f"no reason for field {name!r}")
        out[name] = Row(role, reason)
    return out


def family(used: str, ignored: str, extra_used: str = "", extra_ignored: str = "",
           aliases: dict[str, str] | None = None, tied: bool = False, **why: str) -> Table:
    """A family's table. ``used``/``ignored``: the class's keys (space-separated); ``extra_*``: keys
    the class does not define but that the family accepts; ``tied``: the class's default of
    tie_word_embeddings; ``why``: reasons not in ``SHARED`` (``HEAD_DIM_READ`` is the shared
    reason of an undeclared head_dim that the code reads)."""
    aliases = aliases or {}
    rows = {**_rows(used, USED, why), **_rows(ignored, IGNORED, why)}
    extra = {**_rows(extra_used, USED, why), **_rows(extra_ignored, IGNORED, why)}
    for name in _ACCEPTED_BY_ALL:
        if name not in rows:           # DeepSeek-V4's class still defines rope_theta, partial_rotary_factor
            extra.setdefault(name, Row(IGNORED, SHARED[name]))
    for alias, target in aliases.items():
        extra[alias] = Row(rows.get(target, Row(IGNORED, "")).role, f"alias of {target}")
    return Table(rows, extra, dict(aliases), tied)


def wrapper(decoder: str, tied: bool, ignored: str = "", **why: str) -> Table:
    """A multimodal wrapper's table: its ``text_config`` is the decoder costed (read as family
    ``decoder``), its own ``tie_word_embeddings`` (class default ``tied``) ties the LM head, and its
    image token ids and vision tower cost nothing here. ``ignored``, ``why``: the wrapper's other keys."""
    return family(
        tied=tied,
        used="text_config tie_word_embeddings",
        ignored="boi_token_index eoi_token_index image_token_index vision_config " + ignored,
        extra_ignored="bos_token_id eos_token_id pad_token_id",
        aliases={"image_token_id": "image_token_index", "boi_token_id": "boi_token_index",
                 "eoi_token_id": "eoi_token_index"},
        text_config=f"the decoder that is costed (read as {decoder})",
        tie_word_embeddings=f"whether the LM head is tied (the wrapper's flag decides; default {str(tied).lower()})",
        boi_token_index="token id", eoi_token_index="token id", image_token_index="token id",
        vision_config="the vision tower: not part of the text decoder costed here", **why)._replace(decoder=decoder)
