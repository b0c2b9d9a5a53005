"""Tensor parallelism for the newest block kinds (issue 20 follow-up): vLLM's vocabulary padding, the
linear-attention and state-space mixers, DeepSeek Sparse Attention's indexer and skipped blocks.

Every expected number is written here from vLLM's sharding, read in its model files (the table in
docs/cost-model.md, "Tensor and expert parallelism"), and the projection shapes (2 FLOPs a multiply-add),
not read back from costcalc:

- vllm/model_executor/layers/vocab_parallel_embedding.py: ``pad_vocab_size`` rounds V up to a multiple of
  ``DEFAULT_VOCAB_PADDING_SIZE`` = 64; each device holds and runs padded / tp rows; the gathered logits are
  cut back to V;
- gdn (vllm/model_executor/layers/mamba/gdn_linear_attn.py, ``GatedDeltaNetAttention``): in_proj_qkvz and
  in_proj_ba column-parallel, conv1d column-parallel, out_proj row-parallel: h_lk / tp and h_lv / tp heads;
- mamba1 (mamba_mixer.py, ``MambaMixer``): in_proj, conv1d and dt_proj column-parallel over d_in, x_proj
  and out_proj row-parallel (x_proj's partial dt, B, C all-reduced);
- mamba2 (mamba_mixer2.py, ``MambaMixer2``): heads split; G groups split, or one group replicated on every
  device where G = 1 (``extra_groups_for_head_shards``), and then ``Mixer2RMSNormGated`` all-reduces each
  token's sum of squares (fp32);
- kda (kda.py, ``KimiDeltaAttention``): q, k, v, f_b, b, g_b column-parallel, o row-parallel,
  ``f_a_proj`` and ``g_a_proj`` ``ReplicatedLinear``;
- lightning (linear_attn.py, ``MiniMaxText01LinearAttention``): qkv_proj, output_gate column-parallel,
  out_proj row-parallel, heads / tp; ``MiniMaxText01RMSNormTP`` all-reduces each token's variance (fp32);
- shortconv (short_conv.py, ``ShortConv``): in_proj (d -> 3 d) and the conv's d channels column-parallel,
  out_proj row-parallel;
- DeepSeek Sparse Attention (deepseek_v2.py, ``Indexer``: "no tensor parallel, just replicated"): wq_b,
  wk, weights_proj ``ReplicatedLinear``, so every device scores every key with all h_I heads; the sparse
  MLA core runs h_q / tp heads.
"""
import json
import math

import pytest

from costcalc import calc, presets
from costcalc.evaluate import Options, Query

from cli_run import one_error, run

PAD = 64    # vLLM's DEFAULT_VOCAB_PADDING_SIZE


def padded(V):
    return math.ceil(V / PAD) * PAD


def row(preset, workload="prefill", tp=2, ep=1, **inputs):
    query = Query(presets.load(preset), workload, Options(tp=tp, ep=ep))
    return {k: v[0] for k, v in calc.answer(query, **{k: [v] for k, v in inputs.items()}).items()}


def where(got, op):
    return {c["where"]: c for c in got["collectives"] if c["op"] == op}


# --- 1. the vocabulary padded as vLLM pads it ------------------------------------------------------

def test_granite_vocabulary_padded_to_64_and_split():
    B, S, d, V = 2, 8, 4096, 49155
    got = row("granite-3.1-8b-base", batch=B, seq=S)
    pad = padded(V)                                  # 769 x 64 = 49216
    assert pad == 49216
    extra = 2 * B * d * (pad - V)                    # the padded rows' logits, run by the two devices
    assert got["flops_per_device"] * 2 == got["total_flops"] + extra
    assert got["replicated_flops"] == extra and got["replicated"] == f"lm_head (vocabulary padded to {pad})"
    assert where(got, "all_gather")["lm_head"]["bytes"] == B * pad * 2     # the padded logits gathered
    # one device: the model's V, no padding (costcalc keeps single-device numbers exact to the model)
    one = calc.answer(Query(presets.load("granite-3.1-8b-base"), "prefill"), batch=[B], seq=[S])
    assert one["total_flops"][0] == got["total_flops"] and one["lm_head_flops"][0] == 2 * B * d * V


def test_padded_vocabulary_weights_per_device(capsys):
    """granite-3.1-8b-base ties its embeddings: one table of padded / tp rows a device."""
    d, V = 4096, 49155
    args = ["memory", "-p", "granite-3.1-8b-base", "-b", "1", "-t", "1k", "--device", "h100", "-f", "json"]
    whole = json.loads(run(capsys, *args)[1])[0]
    tp2 = json.loads(run(capsys, *args, "--tp", "2")[1])[0]
    assert tp2["weight_bytes_per_device"] * 2 == whole["weight_bytes_resident"] + (padded(V) - V) * d * 2


def test_a_padded_vocabulary_that_does_not_divide_is_refused(tmp_path, capsys):
    path = tmp_path / "wide.json"          # V 130 -> 192 = 3 x 64 rows: not a multiple of 128
    path.write_text(json.dumps({"name": "wide", "arch": "gqa.dense", "L": 1, "d": 128, "h_q": 128, "h_kv": 128,
                                "d_h": 1, "m": 128, "V": 130}))
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "8", "--tp", "128")
    assert code != 0 and one_error(err, "vocabulary V 130, padded to 192"), err
    assert "does not divide by 128" in err
    code, out, _ = run(capsys, "prefill", "--preset-file", str(path), "--seq", "8", "--tp", "64", "-f", "json")
    assert code == 0 and json.loads(out)[0]["replicated"] == "lm_head (vocabulary padded to 192)"


# --- 2. the mixers ------------------------------------------------------------------------------------

def test_gated_deltanet_splits_every_operator():
    """Qwen3.5-27B: gdn heads 16 / 48 and gqa KV heads 4 all divide by 2, V a multiple of 64."""
    got = row("qwen3.5-27b", batch=2, seq=16)
    assert got["flops_per_device"] * 2 == got["total_flops"] and got["replicated"] == "none"
    L, T, d = 64, 32, 5120
    reduce = where(got, "all_reduce")
    assert reduce["o_proj"]["count"] == 16 and reduce["mixer out_proj"]["count"] == 48    # row-parallel outputs
    assert reduce["ffn down_proj"]["count"] == L and reduce["mixer out_proj"]["bytes"] == T * d * 2


def test_mamba1_halves_and_all_reduces_x_proj():
    """Mamba-2.8B: every op over d_in halves; only the padded LM head rows are extra; x_proj is row-parallel."""
    B, S, d, V, L, r_dt, N = 2, 8, 2560, 50280, 64, 160, 16
    got = row("mamba-2.8b-hf", batch=B, seq=S)
    head, head_device = 2 * B * d * V, 2 * B * d * padded(V) // 2
    assert got["flops_per_device"] == (got["total_flops"] - head) / 2 + head_device
    reduce = where(got, "all_reduce")
    assert reduce["mamba1 x_proj"] == {"op": "all_reduce", "where": "mamba1 x_proj", "count": L,
                                       "bytes": B * S * (r_dt + 2 * N) * 2}
    assert reduce["mixer out_proj"]["count"] == L and "o_proj" not in reduce and "ffn down_proj" not in reduce


def test_mamba2_one_group_replicated_and_its_norm_all_reduced():
    """Granite-4.0-H-Small: G = 1, so every device keeps the group's B and C (in_proj's 2 N_s columns and
    their conv channels) and the gated norm sums its squares over the devices."""
    B, S, d, N, mamba, E, moe = 1, 8, 4096, 128, 36, 72, 40
    T = B * S
    got = row("granite-4.0-h-small", ep=2, batch=B, seq=S)
    assert set(got["replicated"].split(", ")) == {"in_proj (groups replicated: G < tp)", "router",
                                                 "conv (groups replicated: G < tp)"}
    K_c = 4
    in_proj = mamba * 2 * T * d * 2 * N      # B and C of the one group, once more on the second device
    router = moe * 2 * T * d * E
    conv = mamba * 2 * N * 2 * T * K_c       # their conv channels: causal (recurrent), one output a token
    assert got["replicated_flops"] == in_proj + router + conv
    reduce = where(got, "all_reduce")
    assert reduce["mamba2 gated norm"] == {"op": "all_reduce", "where": "mamba2 gated norm", "count": mamba,
                                           "bytes": T * 4}
    assert reduce["mixer out_proj"]["count"] == mamba and reduce["o_proj"]["count"] == moe - mamba


def test_mamba2_groups_that_divide_are_split():
    """Falcon-H1-34B (attention beside Mamba-2, G = 2): nothing replicated at tp 2, no norm all-reduce;
    the attention's o_proj and the mixer's out_proj are each row-parallel (two all-reduces a layer)."""
    got = row("falcon-h1-34b-base", batch=1, seq=8)
    assert got["flops_per_device"] * 2 == got["total_flops"] and got["replicated"] == "none"
    reduce = where(got, "all_reduce")
    assert reduce["o_proj"]["count"] == reduce["mixer out_proj"]["count"] == 72
    assert "mamba2 gated norm" not in reduce


def test_mamba2_groups_neither_one_nor_divided_are_refused(capsys):
    code, _, err = run(capsys, "prefill", "-p", "falcon-h1-34b-base", "--seq", "8", "--tp", "4")
    assert code != 0 and one_error(err, "2 Mamba-2 groups do not divide by 4 and are not 1"), err


def test_kda_replicates_its_lora_down_projections():
    """Kimi-Linear at tp2 ep2: f_a_proj (d -> d_lk) and g_a_proj (d -> d_lv) are ReplicatedLinear in vLLM,
    as MLA's kv_a_proj_with_mqa and the router."""
    B, S, d, d_lk, d_lv, kda, mla, r_kv, d_rope, E, moe = 1, 8, 2304, 128, 128, 20, 7, 512, 64, 256, 26
    T = B * S
    got = row("kimi-linear-48b-a3b", ep=2, batch=B, seq=S)
    extra = kda * 2 * T * d * (d_lk + d_lv) + mla * 2 * T * d * (r_kv + d_rope) + moe * 2 * T * d * E
    assert got["replicated_flops"] == extra
    assert set(got["replicated"].split(", ")) == {"f_a_proj", "g_a_proj", "kv_a_proj_with_mqa", "router"}
    assert got["flops_per_device"] * 2 == got["total_flops"] + extra


def test_lightning_heads_split_and_norm_all_reduced():
    B, S, L_lin = 2, 8, 70
    got = row("minimax-text-01", ep=2, batch=B, seq=S)
    assert got["replicated"] == "router"
    assert where(got, "all_reduce")["lightning norm"] == {"op": "all_reduce", "where": "lightning norm",
                                                          "count": L_lin, "bytes": B * S * 4}


def test_short_convolution_channels_split():
    """LFM2-1.2B: the short convolution's d channels, its in_proj's 3 d outputs and out_proj's d inputs are
    split (d_c = d / tp), the residual's d is not: every operator halves, the conv window too."""
    B, S, d, K_c, conv_layers = 2, 8, 2048, 3, 10
    got = row("lfm2-1.2b", batch=B, seq=S)
    assert got["flops_per_device"] * 2 == got["total_flops"] and got["replicated"] == "none"
    one = calc.answer(Query(presets.load("lfm2-1.2b"), "prefill"), batch=[B], seq=[S])
    assert one["total_flops"][0] == got["total_flops"]
    reduce = where(got, "all_reduce")
    assert (reduce["o_proj"]["count"], reduce["mixer out_proj"]["count"], reduce["ffn down_proj"]["count"]) == \
        (6, conv_layers, 16)


def test_short_convolution_window_per_device(capsys):
    B, d, K_c, layers = 2, 2048, 3, 10
    base = ["memory", "-p", "lfm2-1.2b", "-b", str(B), "-t", "1k", "--device", "h100", "-f", "json"]
    whole = json.loads(run(capsys, *base)[1])[0]
    tp2 = json.loads(run(capsys, *base, "--tp", "2")[1])[0]
    assert whole["state_bytes"] == B * layers * d * (K_c - 1) * 2          # causal: K_c - 1 positions, bf16
    assert tp2["state_bytes_per_device"] == B * layers * (d // 2) * (K_c - 1) * 2


def test_a_decode_step_of_mixers_divides_too():
    got = row("qwen3.5-27b", "decode", batch=4, context=100)
    assert got["flops_per_device"] * 2 == got["total_flops"] and got["replicated"] == "none"
    assert where(got, "all_reduce")["mixer out_proj"]["bytes"] == 4 * 5120 * 2


def test_states_split_with_the_heads(capsys):
    """The recurrent state and the conv window per device: half of each layer's, except Granite's one
    Mamba-2 group, whose 2 N_s conv channels every device keeps (K_c - 1 positions, bf16, recurrent)."""
    base = ["memory", "-b", "2", "-t", "1k", "--device", "h100", "-f", "json"]
    whole = json.loads(run(capsys, *base, "-p", "qwen3.5-27b")[1])[0]
    tp2 = json.loads(run(capsys, *base, "-p", "qwen3.5-27b", "--tp", "2")[1])[0]
    assert tp2["state_bytes_per_device"] * 2 == whole["state_bytes"]
    assert tp2["kv_cache_bytes_per_device"] * 2 == whole["kv_cache_bytes"]       # 4 KV heads, 2 a device
    whole = json.loads(run(capsys, *base, "-p", "granite-4.0-h-small")[1])[0]
    tp2 = json.loads(run(capsys, *base, "-p", "granite-4.0-h-small", "--tp", "2", "--ep", "2")[1])[0]
    B, layers, N, K_c = 2, 36, 128, 4
    assert tp2["state_bytes_per_device"] * 2 == whole["state_bytes"] + B * layers * 2 * N * (K_c - 1) * 2


# --- 3. DeepSeek Sparse Attention and skipped blocks -------------------------------------------------

def test_dsa_indexer_is_replicated_and_its_cache_whole():
    B, S, tp = 1, 8, 2
    d, r_q, r_kv, d_rope, h_I, d_I, E, L, moe = 7168, 1536, 512, 64, 64, 128, 256, 61, 58
    T = B * S
    got = row("deepseek-v3.2", ep=2, batch=B, seq=S)
    projections = 2 * T * (d * r_q + d * (r_kv + d_rope) + r_q * h_I * d_I + d * d_I + d * h_I)
    scores = B * S * (S + 1) // 2 * (2 * h_I * d_I + 2 * h_I)       # causal: every legal key, all h_I heads
    assert got["replicated_flops"] == (tp - 1) * (L * (projections + scores) + moe * 2 * T * d * E)
    assert got["replicated"] == ("q_a_proj, kv_a_proj_with_mqa, indexer.wq_b, indexer.wk, indexer.weights_proj, "
                                 "indexer, router")


def test_dsa_latent_and_index_keys_are_held_whole(capsys):
    base = ["memory", "-p", "deepseek-v3.2", "-b", "2", "-t", "1k", "--device", "h200", "-f", "json"]
    whole = json.loads(run(capsys, *base)[1])[0]
    tp8 = json.loads(run(capsys, *base, "--tp", "8", "--ep", "8")[1])[0]
    assert tp8["kv_cache_bytes_per_device"] == whole["kv_cache_bytes"]


def test_skipped_attention_blocks_take_no_attention_all_reduce():
    """Llama-3.3-Nemotron-Super-49B: 49 of 80 layers attend; every layer has an FFN."""
    got = row("llama-3.3-nemotron-super-49b", batch=1, seq=8)
    assert got["flops_per_device"] * 2 == got["total_flops"] and got["replicated"] == "none"
    reduce = where(got, "all_reduce")
    assert reduce["o_proj"]["count"] == 49 and reduce["ffn down_proj"]["count"] == 80
    assert "mixer out_proj" not in reduce


def test_nemotron_h_mixer_only_and_ffn_only_layers():
    got = row("nemotron-h-56b-base-8k", batch=1, seq=8)
    reduce = where(got, "all_reduce")
    assert (reduce["o_proj"]["count"], reduce["mixer out_proj"]["count"], reduce["ffn down_proj"]["count"]) == \
        (10, 54, 54)
    assert got["flops_per_device"] * 2 == got["total_flops"]      # G = 8 divides, V = 131072


def test_deepseek_v4_splits_heads_and_output_groups_and_replicates_the_rest():
    """DeepSeek-V4-Flash at tp2 ep2 (deepseek_v4.py, ``DeepseekV4Attention``): wq_b column-parallel, wo_a over
    o_groups / tp groups, wo_b row-parallel; fused_wqa_wkv (q_a_proj, kv_proj) and the compressors
    ``disable_tp=True``, the indexer replicated, the hyper-connections' parameters plain (whole)."""
    B, S, tp = 1, 8, 2
    d, r_q, d_h, n_hc, d_I, h_I, E = 4096, 1024, 512, 4, 128, 64, 256
    swa, csa, hca = 2, 21, 20
    T = B * S
    every = 2 * T * (d * r_q + d * d_h                            # q_a_proj, kv_proj
                     + 2 * n_hc * d * n_hc * (2 + n_hc)           # attn_hc.fn, ffn_hc.fn
                     + 2 * n_hc * n_hc * d                        # attn_hc.comb, ffn_hc.comb
                     + d * E)                                     # router
    hca_own = 2 * T * 2 * d * d_h                                 # the compressor's kv_proj and gate_proj
    csa_own = 2 * T * (2 * d * 2 * d_h + 2 * d * 2 * d_I + r_q * h_I * d_I + d * h_I)
    got = row("deepseek-v4-flash", ep=2, batch=B, seq=S)
    hc_head = 2 * T * n_hc * d * n_hc                             # once a model, every new token
    projections = (swa + csa + hca) * every + hca * hca_own + csa * csa_own + hc_head
    # the indexer's scores: all of the model's on every device (indexer_flops, the whole model's term)
    assert got["replicated_flops"] == (tp - 1) * (projections + got["indexer_flops"])
    assert got["flops_per_device"] * 2 == got["total_flops"] + got["replicated_flops"]
    assert where(got, "all_reduce")["o_proj"]["count"] == swa + csa + hca


def test_deepseek_v4_caches_are_whole_on_every_device(capsys):
    """One K=V head and its compressed entries: no head split divides them."""
    base = ["memory", "-p", "deepseek-v4-flash", "-b", "2", "-t", "8k", "--device", "h200", "-f", "json"]
    whole = json.loads(run(capsys, *base)[1])[0]
    tp4 = json.loads(run(capsys, *base, "--tp", "4", "--ep", "4")[1])[0]
    assert tp4["kv_cache_bytes_per_device"] == whole["kv_cache_bytes"]


# --- what stays refused ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["-p", "deepseek-v4-flash", "--tp", "16", "--ep", "16"], "output-projection group count G_o 8 does not divide"),
    (["-p", "qwen3.5-27b", "--tp", "2", "--sp"], "--sp with qwen3.5-27b's mixer layers is not modelled"),
    (["-p", "qwen3.5-27b", "--tp", "32"], "linear-attention key head count h_lk 16 does not divide by 32"),
])
def test_what_stays_refused(capsys, args, message):
    code, _, err = run(capsys, "prefill", "--seq", "64", *args)
    assert code != 0 and one_error(err, message), err


def test_a_training_step_keeps_the_mixers_refused(capsys):
    code, _, err = run(capsys, "train", "-p", "qwen3.5-27b", "--seq", "64", "--tp", "2")
    assert code != 0 and one_error(err, "not modelled under parallelism for a training step"), err
    code, _, err = run(capsys, "train", "-p", "granite-3.1-8b-base", "--seq", "64", "--tp", "2")
    assert code != 0 and one_error(err, "Megatron pads it to a multiple of 128 tp"), err


@pytest.mark.slow
def test_the_sharded_decoder_runs_padded_vocabulary_rows(tmp_path):
    """(Slow: two processes, ~30 s on a shared CPU.) Two gloo ranks of the verify decoder with V = 250
    (padded to 256): each rank's embedding and LM head
    hold 128 rows, the last 6 of rank 1 zero; the counted FLOPs and collectives equal costcalc's per-device
    numbers and the gathered logits, cut back to 250, the whole decoder's."""
    from pathlib import Path

    from costcalc.layout import Layout
    from costcalc.verify import parallel

    spec = json.loads((Path(__file__).parent.parent / "verify" / "dry" / "dense.json").read_text())
    path = tmp_path / "dense-v250.json"
    path.write_text(json.dumps({**spec, "name": "dense-v250", "V": 250}))
    rows = parallel.verify(presets.load_file(path), Layout(2), ("prefill", "decode"), [8], 2)
    assert rows and all(r["match"] for r in rows), [r for r in rows if not r["match"]]
    B, d = 2, 64
    checks = {r["check"]: r for r in rows if r["rank"] == 1 and r["job"] == "prefill B=2 S=8"}
    assert checks[f"all_gather lm_head x {B * padded(250) * 2} B"]["counted"] == 1
    assert checks["flops lm_head"]["counted"] == 2 * B * d * padded(250) // 2


@pytest.mark.parametrize("preset, replicated", [
    # KDA's f_a_proj d x d_lk and g_a_proj d x d_lv (20 layers), MLA's kv_a_proj_with_mqa d x (r_kv + d_rope)
    # (7 layers), the router d x E (26 MoE layers)
    ("kimi-linear-48b-a3b", 2304 * (128 + 128) * 20 + 2304 * (512 + 64) * 7 + 2304 * 256 * 26),
    # Mamba-2's one group: in_proj's B and C columns, d x 2 N_s (36 layers); the router d x E (40 layers)
    ("granite-4.0-h-small", 4096 * 2 * 128 * 36 + 4096 * 72 * 40),
    ("qwen3.5-27b", 0),
])
def test_weights_per_device_are_the_whole_and_the_replicated(capsys, preset, replicated):
    """tp2 (ep2 with MoE): each device holds half of every split matrix, E / 2 experts, and the replicated
    matrices whole: weight bytes per device x 2 = the model's + the replicated ones (bf16)."""
    base = ["memory", "-p", preset, "-b", "1", "-t", "1k", "--device", "h200", "-f", "json"]
    whole = json.loads(run(capsys, *base)[1])[0]
    ep = ["--ep", "2"] if preset != "qwen3.5-27b" else []
    tp2 = json.loads(run(capsys, *base, "--tp", "2", *ep)[1])[0]
    assert whole["weight_dtype"] == "bf16"
    assert tp2["weight_bytes_per_device"] * 2 == whole["weight_bytes_resident"] + replicated * 2
