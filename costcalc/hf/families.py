"""The layer lists, one mapper per family: what transformers 5.23's modelling code runs for a config.

Each mapper returns one dict per layer (``{"arch": ..., sizes}``). Where the current modelling
code and older reference code disagree, the current code is followed (docs/hf-import.md):
qwen2_moe windows the even layers below ``max_window_layers``; qwen3_moe with
``use_sliding_window`` windows every layer; DeepSeek's MoE layers are those from
``first_k_dense_replace`` on (``moe_layer_freq`` must be 1). Fused projections (phi3's
``qkv_proj`` and ``gate_up_proj``, GPT-NeoX's ``query_key_value``, GLM-4's ``gate_up_proj``) cost
exactly the projections they fuse; parallel attention/MLP blocks (Cohere, GPT-NeoX, GPT-J, Phi,
StableLM) run the same matmuls as serial ones; GPT-NeoX, StarCoder2, Apertus, GPT-J, Phi,
Nemotron, GPT-BigCode, OPT, Bloom and MPT have a non-gated MLP (FFN ``mlp``); Llama 4 has chunked
local attention (``chunk``). Learned positions and ALiBi run no matmul. Biases are not counted.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from .reader import CHUNKED, Layer, Reader, dense_layers, moe_layers

Mapper = Callable[[Reader], list[Layer]]


def _none(r: Reader) -> list[bool]:
    return [False] * r.layer_count()


def _every_layer(r: Reader) -> list[bool]:
    """mistral, mixtral, phi3, phimoe, starcoder2: one sliding mask for the whole model when sliding_window is set."""
    return [r.has("sliding_window")] * r.layer_count()


def _causal(r: Reader) -> None:
    if r.get("use_bidirectional_attention", False) is not False:
        raise r.error("use_bidirectional_attention must be false: a non-causal decoder is not modelled")


def _dense(head_dim: str = "derive", kv: str = "derive", ffn: str = "dense",
           windows: Callable[[Reader], list[bool]] = _none, causal: bool = False) -> Mapper:
    """A family of dense layers: its ``Reader.heads`` modes, FFN kind and which layers are windowed
    (``causal``: its class has ``use_bidirectional_attention``, which must be false)."""
    def mapper(r: Reader) -> list[Layer]:
        if causal:
            _causal(r)
        return dense_layers(r, r.heads(head_dim, kv), windows(r), ffn)
    return mapper


def _all_moe(kv: str, experts: str = "num_local_experts", k: int | None = None,
             windows: Callable[[Reader], list[bool]] = _none) -> Mapper:
    """A family whose every layer is MoE with experts of width intermediate_size."""
    def mapper(r: Reader) -> list[Layer]:
        expert = {"E": r.need(experts), "k": k or r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
        return moe_layers(r, r.heads("derive", kv), windows(r), [True] * r.layer_count(), expert)
    return mapper


# the families costcalc imported before transformers 5

def _mistral(r: Reader) -> list[Layer]:
    if "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (null for no window; the class default is 4096)")
    return dense_layers(r, r.heads("derive", kv="stated"), _every_layer(r))


def _qwen_windows(r: Reader, below: bool) -> list[bool]:
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


def _mixtral(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive", kv="stated"), _every_layer(r), [True] * n, expert)


def _sparse_steps(r: Reader, experts: int) -> list[bool]:
    """Qwen2/3-MoE: layer i is MoE iff experts > 0, i not in mlp_only_layers, (i+1) % step == 0."""
    step = r.count("decoder_sparse_step", 1, minimum=1)
    dense_only = set(r.indices("mlp_only_layers", []))
    return [experts > 0 and i not in dense_only and (i + 1) % step == 0 for i in range(r.layer_count())]


def _qwen2_moe(r: Reader) -> list[Layer]:
    experts = r.int("num_experts", 0) if r.has("num_experts") else r.need("num_experts")
    is_moe = _sparse_steps(r, experts)
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    shared = {"E_s": 1, "m_s": r.need("shared_expert_intermediate_size")} if any(is_moe) else {}
    return moe_layers(r, r.heads("derive", kv="stated"), _qwen_windows(r, below=True), is_moe, expert, shared,
                      gate=True)


def _qwen3_moe(r: Reader) -> list[Layer]:
    experts = r.int("num_local_experts", 0) if r.has("num_local_experts") else r.need("num_local_experts")
    is_moe = _sparse_steps(r, experts)
    expert = {"E": experts, "k": r.need("num_experts_per_tok"), "m_e": r.need("moe_intermediate_size")} \
        if any(is_moe) else {}
    local = [r.flag("use_sliding_window", False)] * r.layer_count()
    return moe_layers(r, r.heads("derive", kv="stated"), local, is_moe, expert)


def _olmoe(r: Reader) -> list[Layer]:
    expert = {"E": r.need("num_experts"), "k": r.need("num_experts_per_tok"), "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    return moe_layers(r, r.heads("derive"), [False] * n, [True] * n, expert)


def _deepseek(r: Reader) -> list[Layer]:
    if "q_lora_rank" not in r.config:
        raise r.error("needs field 'q_lora_rank' (null for no query LoRA; the class default is 1536)")
    mla = {"h_q": r.need("num_attention_heads"), "r_kv": r.need("kv_lora_rank"), "d_nope": r.need("qk_nope_head_dim"),
           "d_rope": r.need("qk_rope_head_dim"), "d_v": r.need("v_head_dim")}
    r.same("qk_head_dim", mla["d_nope"] + mla["d_rope"], "it must be qk_nope_head_dim + qk_rope_head_dim")
    r.same("num_key_value_heads", mla["h_q"], "MLA gives every head its own key and value (transformers needs "
                                               "num_key_value_heads = num_attention_heads)")
    r.same("moe_layer_freq", 1, "transformers 5.23 makes every layer from first_k_dense_replace on MoE")
    attn = "mla"
    if r.has("q_lora_rank"):
        mla["r_q"], attn = r.need("q_lora_rank"), "mla_q"
    first = r.count("first_k_dense_replace", 3 if r.family == "deepseek_v3" else 0)
    m_e = r.need("moe_intermediate_size")
    out = []
    for i in range(r.layer_count()):
        if i >= first:
            sizes = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e,
                     "E_s": r.need("n_shared_experts"), "m_s": m_e}
            out.append({"arch": f"{attn}.moe_shared", **mla, **sizes})
        else:
            out.append({"arch": f"{attn}.dense", **mla, "m": r.need("intermediate_size")})
    return out


def _gpt_oss(r: Reader) -> list[Layer]:
    k = r.need("num_experts_per_tok")
    r.same("experts_per_token", k, "transformers 5.23 runs num_experts_per_tok experts (it never reads this key)")
    expert = {"E": r.need("num_local_experts"), "k": k, "m_e": r.need("intermediate_size")}
    n = r.layer_count()
    local = r.windowed([i % 2 == 0 for i in range(n)], ())
    return moe_layers(r, r.heads("stated", kv="stated"), local, [True] * n, expert)


def _gemma2(r: Reader) -> list[Layer]:
    _causal(r)
    r.same("sliding_window_size", r.get("sliding_window"), "it must equal sliding_window")
    n = r.layer_count()
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed([i % 2 == 0 for i in range(n)], ()))


def _gemma3_text(r: Reader) -> list[Layer]:
    _causal(r)
    keys = ("sliding_window_pattern", "_sliding_window_pattern")
    given = {r.count(k, 6, minimum=1) for k in keys if r.has(k)}
    if len(given) > 1:
        raise r.error(f"fields {keys[0]!r} and {keys[1]!r} disagree")
    every = given.pop() if given else 6
    derived = [(i + 1) % every != 0 for i in range(r.layer_count())]
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed(derived, keys))


# the attention + MLP/MoE decoder families added with transformers 5

def _olmo3_windows(r: Reader) -> list[bool]:
    return r.windowed([(i + 1) % 4 != 0 for i in range(r.layer_count())], ())


def _exaone4_windows(r: Reader) -> list[bool]:
    """layer_types, else the pattern: an int p (layer i global iff (i+1) % p == 0) or, as
    published files write it, a string such as 'LLLG' (read only to check layer_types)."""
    n = r.layer_count()
    pattern = r.get("sliding_window_pattern", 4)
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise r.error(f"sliding_window_pattern {pattern!r} is not a string of L (local) and G (global)")
        derived = [pattern[i % len(pattern)] == "L" for i in range(n)]
    else:
        every = r.count("sliding_window_pattern", 4, minimum=1)
        derived = [(i + 1) % every != 0 for i in range(n)]
    if r.get("layer_types") is None and (isinstance(pattern, str) or not r.has("sliding_window")):
        raise r.error("needs field 'layer_types': transformers 5.23 cannot derive it from a string "
                      "sliding_window_pattern or without a sliding_window")
    return r.windowed(derived, ("sliding_window_pattern",) if r.has("sliding_window_pattern") else ())


def _smollm3_windows(r: Reader) -> list[bool]:
    n = r.layer_count()
    on = r.flag("use_sliding_window", False) and r.has("sliding_window")
    interval = r.count("no_rope_layer_interval", 4, minimum=1)
    nope = r.indices("no_rope_layers", [int((i + 1) % interval != 0) for i in range(n)])
    if len(nope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([on and not nope[i] for i in range(n)],
                       tuple(k for k in ("use_sliding_window", "no_rope_layers") if r.has(k)))
    if any(local) and not on:
        raise r.error("'layer_types' windows layers but use_sliding_window is not true or sliding_window is null")
    return local


def _glm4_moe(r: Reader) -> list[Layer]:
    first = r.count("first_k_dense_replace", 1)
    n = r.layer_count()
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    shared = {"E_s": r.need("n_shared_experts"), "m_s": m_e}
    return moe_layers(r, r.heads("derive", kv="stated"), [False] * n, [i >= first for i in range(n)], expert, shared)


def _ernie4_5_moe(r: Reader) -> list[Layer]:
    n = r.layer_count()
    start = r.count("moe_layer_start_index", 1)
    end = r.int("moe_layer_end_index", -1) if "moe_layer_end_index" in r.config else -1
    end = n - 1 if end == -1 else end
    step = r.count("moe_layer_interval", 1, minimum=1)
    is_moe = [(i + 1) % step == 0 and start <= i <= end for i in range(n)]
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("moe_num_experts"), "k": r.need("moe_k"), "m_e": m_e}
    shared_count = r.int("moe_num_shared_experts", 0) if r.has("moe_num_shared_experts") else r.need("moe_num_shared_experts")
    shared = {"E_s": shared_count, "m_s": m_e} if shared_count else None
    return moe_layers(r, r.heads("derive", kv="stated"), [False] * n, is_moe, expert, shared)


def _llama4_text(r: Reader) -> list[Layer]:
    """Chunked attention where layer_types says so (absent: on the RoPE layers, no_rope_layers[i]
    == 1); MoE on moe_layers (absent: every interleave_moe_layer_step-th layer) with one shared
    expert of the expert width, dense SwiGLU of intermediate_size_mlp elsewhere. transformers runs
    every expert on every token and zeroes the unselected ones; costcalc counts the k routed."""
    n = r.layer_count()
    interval = r.count("no_rope_layer_interval", 4, minimum=1)
    rope = r.indices("no_rope_layers", []) or [int((i + 1) % interval != 0) for i in range(n)]
    if len(rope) != n:
        raise r.error("'no_rope_layers' must list one flag per layer")
    local = r.windowed([bool(x) for x in rope], ("no_rope_layers",) if r.get("no_rope_layers") else (), CHUNKED)
    step = r.count("interleave_moe_layer_step", 1, minimum=1)
    moe = set(r.indices("moe_layers", list(range(step - 1, n, step))))
    m_e = r.need("intermediate_size")
    expert = {"E": r.need("num_local_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    return moe_layers(r, r.heads("stated", kv="stated"), local, [i in moe for i in range(n)], expert,
                      {"E_s": 1, "m_s": m_e}, dense_width="intermediate_size_mlp", kind="chunk")


# older attention + MLP decoders

def _gptj(r: Reader) -> list[Layer]:
    """Multi-head attention (q, k, v, out_proj, each d x d; d_h = n_embd // n_head) and a
    non-gated MLP of n_inner (null: 4 * n_embd) in a parallel block; the LM head's bias is not counted."""
    d, h = r.need("n_embd"), r.need("n_head")
    if d % h:
        raise r.error(f"n_embd ({d}) must be divisible by n_head ({h}) (transformers refuses it)")
    m = r.need("n_inner") if r.has("n_inner") else 4 * d
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": m} for _ in range(r.layer_count())]


def _stablelm(r: Reader) -> list[Layer]:
    """d_h = hidden_size // heads, which transformers requires to divide exactly; SwiGLU."""
    d, h = r.need("hidden_size"), r.need("num_attention_heads")
    if d % h:
        raise r.error(f"hidden_size ({d}) must be divisible by num_attention_heads ({h}) (transformers refuses it)")
    return dense_layers(r, r.heads("derive", kv="stated"), _none(r))


def _nemotron(r: Reader) -> list[Layer]:
    """num_key_value_heads must be stated (the class default null makes the attention fail)."""
    r.need("num_key_value_heads")
    return dense_layers(r, r.heads("derive", kv="stated"), _none(r), ffn="mlp")
# the attention + SwiGLU decoder families added later

def _ministral(r: Reader) -> list[Layer]:
    """layer_types decides (absent: every layer windowed when sliding_window is set, as the class
    derives it); head_dim must be a number (5.23 reads it as is: null cannot build)."""
    if "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (null for no window; the class default is 4096)")
    n = r.layer_count()
    return dense_layers(r, r.heads("require", kv="stated"), r.windowed([r.has("sliding_window")] * n, ()))


def _helium(r: Reader) -> list[Layer]:
    """Llama's layers, but o_proj is hidden_size x hidden_size: heads x head_dim must equal hidden_size."""
    heads = r.heads("require", kv="stated")
    if heads["h_q"] * heads["d_h"] != r.need("hidden_size"):
        raise r.error(f"num_attention_heads x head_dim ({heads['h_q']} x {heads['d_h']}) must equal hidden_size "
                      f"({r.need('hidden_size')}): Helium's o_proj is hidden_size x hidden_size")
    return dense_layers(r, heads, [False] * r.layer_count())


# older attention + non-gated MLP decoders: learned positions or ALiBi (no matmul), fused projections

def _divisible(r: Reader, width: str, heads: str) -> None:
    d, h = r.need(width), r.need(heads)
    if d % h:
        raise r.error(f"{width} ({d}) must be divisible by {heads} ({h}) (transformers refuses it)")


def _gpt_bigcode(r: Reader) -> list[Layer]:
    """Multi-query (multi_query true: one K/V head) or multi-head attention through one fused c_attn
    d x (d + 2 h_kv d_h), c_proj d x d, and a non-gated MLP of n_inner (null: 4 * n_embd). The learned
    position table (wpe) is a lookup: no matmul, its parameters not counted."""
    _divisible(r, "n_embd", "n_head")
    if r.flag("add_cross_attention", False):
        raise r.error("add_cross_attention is true: cross-attention blocks are not modelled (decoder-only models)")
    heads = r.heads("mha")
    if r.flag("multi_query", True):
        heads["h_kv"] = 1
    r.same("num_key_value_heads", heads["h_kv"], f"multi_query is {str(r.flag('multi_query', True)).lower()} "
                                                  f"(transformers runs {heads['h_kv']} key/value heads)")
    m = r.need("n_inner") if r.has("n_inner") else 4 * r.need("n_embd")
    return [{"arch": "gqa.mlp", **heads, "m": m} for _ in range(r.layer_count())]


def _opt(r: Reader) -> list[Layer]:
    """Multi-head attention (q, k, v, out_proj d x d), non-gated ReLU MLP of ffn_dim. A
    word_embed_proj_dim other than hidden_size adds project_in / project_out products and an LM head
    of that width, which costcalc does not model: refused."""
    _divisible(r, "hidden_size", "num_attention_heads")
    d = r.need("hidden_size")
    if r.has("word_embed_proj_dim") and r.need("word_embed_proj_dim") != d:
        raise r.error(f"word_embed_proj_dim ({r.need('word_embed_proj_dim')}) != hidden_size ({d}): transformers "
                      f"then runs project_in/project_out products and a narrower LM head, which costcalc does not model")
    return dense_layers(r, r.heads("mha"), _none(r), ffn="mlp", width="ffn_dim")


def _bloom(r: Reader) -> list[Layer]:
    """Multi-head attention through a fused query_key_value d x 3d (ALiBi: elementwise), dense d x d,
    and a non-gated GELU MLP of 4 x hidden_size (n_inner is not read)."""
    _divisible(r, "hidden_size", "n_head")
    d = r.need("hidden_size")
    r.same("n_inner", 4 * d, "transformers 5.23 builds an MLP of 4 x hidden_size whatever it says")
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": 4 * d} for _ in range(r.layer_count())]


def _mpt(r: Reader) -> list[Layer]:
    """Multi-head attention through a fused Wqkv d x 3d (ALiBi: elementwise), out_proj d x d, and a
    non-gated GELU MLP of 4 x d_model: 5.23 reads neither expansion_ratio nor attn_type, so a config
    that says otherwise is refused (its checkpoint is not the model transformers builds)."""
    from .tables import SUBTABLES

    _divisible(r, "d_model", "n_heads")
    attn = r.get("attn_config", {})
    if not isinstance(attn, dict):
        raise r.error(f"field 'attn_config' must be an object, got {attn!r}")
    known = SUBTABLES["mpt"]["attn_config"].known()
    for key, value in attn.items():
        if value is not None and key not in known:
            raise r.error(f"field 'attn_config.{key}' is not understood and may change the cost; costcalc does "
                          f"not guess -- remove it if it does not")
    kind = attn.get("attn_type") or "multihead_attention"
    if kind != "multihead_attention":
        raise r.error(f"attn_config.attn_type is {kind!r}: transformers 5.23 builds multi-head attention (Wqkv "
                      f"d x 3d) whatever it says, which is not this checkpoint's model")
    r.same("expansion_ratio", 4, "transformers 5.23 builds an MLP of 4 x d_model whatever it says")
    return [{"arch": "gqa.mlp", **r.heads("mha"), "m": 4 * r.need("d_model")} for _ in range(r.layer_count())]


# attention + MLP decoders added later

def _head_dim_number(r: Reader) -> None:
    """A head_dim key written null: 5.23 reads it as is, and its attention cannot be built."""
    if "head_dim" in r.config and r.config["head_dim"] is None:
        raise r.error("field 'head_dim' must be a number (5.23 reads it as is: null cannot build)")


def _cohere2(r: Reader) -> list[Layer]:
    """Windows per layer_types (absent: sliding_window_pattern p, default 4, layer i global iff
    (i+1) % p == 0); d_h = head_dim when the config carries it, else hidden_size // heads; a
    parallel SwiGLU block. Keys of the original release that 5.23 does not read must say what it runs."""
    _head_dim_number(r)
    r.same("order_of_interleaved_layers", "local_attn_first", "transformers 5.23 puts the sliding layers first")
    r.same("use_gated_activation", True, "transformers 5.23 always runs the gated (SwiGLU) MLP")
    r.same("use_embedding_sharing", r.flag("tie_word_embeddings", True),
           "it must equal tie_word_embeddings (which transformers 5.23 reads)")
    every = r.count("sliding_window_pattern", 4, minimum=1)
    n = r.layer_count()
    local = r.windowed([(i + 1) % every != 0 for i in range(n)],
                       ("sliding_window_pattern",) if r.has("sliding_window_pattern") else ())
    if any(local) and "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (the class default is 4096)")
    return dense_layers(r, r.heads("derive"), local)


def _hunyuan_v1_dense(r: Reader) -> list[Layer]:
    """Llama's layers with per-head QK norms; head_dim must be a number (the class default null
    cannot build). Cross-layer attention (use_cla) is not run by 5.23: it must be off."""
    if r.flag("use_cla", False) and r.count("cla_share_factor", 1) != 1:
        raise r.error("use_cla shares keys and values across layers, which transformers 5.23 does not run "
                      "(it builds k_proj and v_proj on every layer): set use_cla false")
    heads = r.heads("require")
    r.same("attention_head_dim", heads["d_h"], "it must equal head_dim (transformers 5.23 reads head_dim)")
    return dense_layers(r, heads, _none(r))


def _arcee(r: Reader) -> list[Layer]:
    """Llama's attention with a non-gated ReLU^2 MLP (up_proj, down_proj); transformers refuses a
    hidden_size that is not a multiple of the heads."""
    d, h = r.need("hidden_size"), r.need("num_attention_heads")
    if d % h:
        raise r.error(f"hidden_size ({d}) must be divisible by num_attention_heads ({h}) (transformers refuses it)")
    return dense_layers(r, r.heads("derive"), _none(r), ffn="mlp")


def _vaultgemma(r: Reader) -> list[Layer]:
    """Gemma 2's layers without its extra norms: windows per layer_types (absent: the even layers);
    head_dim and num_key_value_heads must be stated (fixed class defaults); transformers refuses a
    hidden_size that is not a multiple of the heads."""
    d, h = r.need("hidden_size"), r.need("num_attention_heads")
    if d % h:
        raise r.error(f"hidden_size ({d}) must be divisible by num_attention_heads ({h}) (transformers refuses it)")
    n = r.layer_count()
    local = r.windowed([i % 2 == 0 for i in range(n)], ())
    if any(local) and "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (the class default is 4096)")
    return dense_layers(r, r.heads("require", kv="stated"), local)


# MoE families added later

def _dots1(r: Reader) -> list[Layer]:
    """GLM-4.5's layout (dense below first_k_dense_replace, then routed plus shared experts of
    width m_e) with Qwen2's windows: absent layer_types, layers i >= max_window_layers (62) are
    windowed when sliding_window (class default 4096) is not null."""
    r.same("moe_layer_freq", 1, "transformers 5.23 makes every layer from first_k_dense_replace on MoE")
    n = r.layer_count()
    first_window = r.count("max_window_layers", 62)
    window_set = "sliding_window" not in r.config or r.has("sliding_window")
    derived = [window_set and i >= first_window for i in range(n)]
    if any(derived) and "sliding_window" not in r.config:
        raise r.error("needs field 'sliding_window' (null for no window; the class default is 4096)")
    local = r.windowed(derived, tuple(k for k in ("sliding_window", "max_window_layers") if k in r.config))
    first = r.count("first_k_dense_replace", 0)
    m_e = r.need("moe_intermediate_size")
    expert = {"E": r.need("n_routed_experts"), "k": r.need("num_experts_per_tok"), "m_e": m_e}
    shared = {"E_s": r.need("n_shared_experts"), "m_s": m_e}
    return moe_layers(r, r.heads("derive", kv="stated"), local, [i >= first for i in range(n)], expert, shared)


def _hunyuan_v1_moe(r: Reader) -> list[Layer]:
    """Every layer MoE: num_experts experts and one ungated shared MLP, all intermediate_size wide;
    k = moe_topk (one per layer where a list). Keys of the published file that 5.23 does not read
    must say what 5.23 builds."""
    heads = r.heads("require", kv="derive")
    n = r.layer_count()
    m = r.need("intermediate_size")
    r.same("attention_head_dim", heads["d_h"], "it must equal head_dim")
    r.same("use_cla", False, "transformers 5.23 has no cross-layer attention sharing")
    r.same("use_mixed_mlp_moe", True, "transformers 5.23 always runs the shared MLP")
    for key, value, why in (("moe_intermediate_size", m, "transformers 5.23's experts are intermediate_size wide"),
                            ("num_shared_expert", 1, "transformers 5.23 builds one shared MLP")):
        given = r.get(key)
        if given is not None and any(v != value for v in (given if isinstance(given, list) else [given])):
            raise r.error(f"field {key!r} is {given!r} but {why} ({value})")
    if isinstance(r.get("num_experts"), list):
        raise r.error("'num_experts' must be one integer (transformers 5.23 cannot build per-layer expert counts)")
    experts = r.need("num_experts")
    topk = r.get("moe_topk")
    if isinstance(topk, list):
        if len(topk) != n or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in topk):
            raise r.error("'moe_topk' must be a positive integer or one per layer (num_hidden_layers)")
        ks = topk
    else:
        ks = [r.need("moe_topk")] * n
    out = []
    for k in ks:
        layer = moe_layers(r, heads, [False], [True], {"E": experts, "k": k, "m_e": m}, {"E_s": 1, "m_s": m})
        out.extend(layer)
    return out


MAPPERS: dict[str, Mapper] = {
    # the families costcalc imported before transformers 5
    "llama": _dense(),
    "mistral": _mistral,
    "qwen2": _dense(kv="stated", windows=partial(_qwen_windows, below=False)),
    "qwen3": _dense("require", "stated", windows=partial(_qwen_windows, below=False)),
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3_moe": _qwen3_moe,
    "olmoe": _olmoe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    # the attention + MLP/MoE decoder families added with transformers 5
    "phi3": _dense(windows=_every_layer),
    "phimoe": _all_moe("stated", k=2, windows=_every_layer),     # sparsemixer: always 2 experts
    "granite": _dense(),
    "granitemoe": _all_moe("derive"),
    "olmo2": _dense(),
    "olmo3": _dense(windows=_olmo3_windows),
    "starcoder2": _dense(kv="stated", ffn="mlp", windows=_every_layer),
    "gemma": _dense("require", "stated", causal=True),
    "cohere": _dense(),
    "gpt_neox": _dense("mha", ffn="mlp"),
    "glm4": _dense("require", "stated"),
    "glm4_moe": _glm4_moe,
    "ernie4_5_moe": _ernie4_5_moe,
    "exaone4": _dense(kv="stated", windows=_exaone4_windows),
    "smollm3": _dense(kv="stated", windows=_smollm3_windows),
    "seed_oss": _dense("stated", "stated"),
    "apertus": _dense(ffn="mlp"),
    "llama4_text": _llama4_text,
    # older attention + MLP decoders
    "gptj": _gptj,
    "phi": _dense(ffn="mlp"),
    "stablelm": _stablelm,
    "nemotron": _nemotron,
    # the attention + SwiGLU decoder families added later
    "ministral": _ministral,
    "ernie4_5": _dense("stated", "stated"),
    "helium": _helium,
    "olmo": _dense(),
    # older attention + non-gated MLP decoders
    "gpt_bigcode": _gpt_bigcode,
    "opt": _opt,
    "bloom": _bloom,
    "mpt": _mpt,
    # attention + MLP decoders added later
    "cohere2": _cohere2,
    "glm": _dense("require", "stated"),
    "hunyuan_v1_dense": _hunyuan_v1_dense,
    "arcee": _arcee,
    "vaultgemma": _vaultgemma,
    # MoE families added later
    "dots1": _dots1,
    "hunyuan_v1_moe": _hunyuan_v1_moe,
}
