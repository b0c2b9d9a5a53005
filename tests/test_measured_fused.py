"""``--timing measured`` for a MoE layer's routed experts (the fused-MoE kernel) and DeepSeek-V3-shaped MLA
(vLLM's whole attention module; TensorRT-LLM's and SGLang's attention kernels and absorbed products): the
estimates rebuilt from the raw tables, and the roofline floor against every measured MoE and MLA shape of H100
and H200. Skipped without aiconfigurator-core (``pip install 'costcalc[measured]'``)."""
import json
import math
from pathlib import Path

import pytest

from cli_run import run
from measured_tables import tables, frame, csv_rows
from costcalc import measured, measured_fused as fused, presets
from costcalc.devices import load as device
from costcalc.evaluate import Options, Query
from costcalc.roofline import Machine, Precision, Routing, experts_touched, point


def measured_row(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--device", "h100", "--timing", "measured", "-f", "csv")
    assert code == 0, err
    return csv_rows(out)[0]


def moe_rows(root: Path, shape: tuple, dtype: str):
    """The balanced one-device rows of one fused-MoE shape in H100's vLLM 0.24.0 table."""
    t = frame(root / "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet")
    hidden, inter, topk, experts = shape
    return t[(t.moe_tp_size == 1) & (t.moe_ep_size == 1) & (t.distribution == "balanced") & (t.moe_dtype == dtype)
             & (t.hidden_size == hidden) & (t.inter_size == inter) & (t.topk == topk) & (t.num_experts == experts)]


# --- the lookups against the raw tables ---------------------------------------------------

def test_experts_are_the_fused_kernel_at_a_measured_token_count(capsys):
    """qwen3-30b-a3b (48 layers; d 2048, top-8 of 128 experts of 768, bf16), a decode step of 64 sequences:
    64 tokens routed, a measured count; the experts' three products are one fused kernel."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "qwen3-30b-a3b", "--context", "1k", "--batch", "64")
    t = moe_rows(root, (2048, 768, 8, 128), "bfloat16")
    kernel = t[t.num_tokens == 64].latency.min() * 1e-3
    assert 48 * kernel > float(row["experts_floor_time_s"])          # above the floor: the table's time
    assert float(row["experts_time_s"]) == pytest.approx(48 * kernel, rel=1e-9)
    assert "experts" not in row["measured_coverage"]


def test_experts_between_measured_token_counts_are_linear(capsys):
    """70 sequences: 70 tokens, between the measured 64 and 80; linear between them."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "qwen3-30b-a3b", "--context", "1k", "--batch", "70")
    t = moe_rows(root, (2048, 768, 8, 128), "bfloat16")
    lo, hi = (t[t.num_tokens == n].latency.min() * 1e-3 for n in (64, 80))
    assert 70 not in set(t.num_tokens)
    assert float(row["experts_time_s"]) == pytest.approx(48 * (lo + (hi - lo) * 6 / 16), rel=1e-9)


def test_experts_beyond_the_measured_tokens_say_so(capsys):
    """A 32k-token prompt routes twice the largest measured count: its time scaled in proportion, and named."""
    root = tables()
    row = measured_row(capsys, "prefill", "-p", "qwen3-30b-a3b", "--seq", "32k")
    t = moe_rows(root, (2048, 768, 8, 128), "bfloat16")
    assert t.num_tokens.max() == 16384
    top = t[t.num_tokens == 16384].latency.min() * 1e-3
    assert float(row["experts_time_s"]) == pytest.approx(max(48 * top * 2, float(row["experts_floor_time_s"])),
                                                         rel=1e-9)
    assert "experts (fused MoE): tokens=32768 above the largest measured 16384" in row["measured_coverage"]


def test_non_gated_experts_are_looked_up_at_their_own_shapes_only(capsys):
    """Nemotron-3 Nano's experts are up and down only: looked up at its own (non-gated) measured shape; a gated
    model is never matched with a non-gated shape, nor the other way round."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "nvidia-nemotron-3-nano-30b-a3b", "--context", "1k")
    spec = presets.load("nvidia-nemotron-3-nano-30b-a3b")
    layers = sum(g.count for g in spec.groups if g.block.ffn == "moe")
    t = moe_rows(root, (2688, 1856, 6, 128), "bfloat16")
    kernel = t[t.num_tokens == 1].latency.min() * 1e-3
    assert float(row["experts_time_s"]) == pytest.approx(max(layers * kernel, float(row["experts_floor_time_s"])),
                                                         rel=1e-9)
    assert "experts" not in row["measured_coverage"]
    timing = measured.timing("h100", "vllm", None)
    assert fused.moe(timing, 64, (2688, 1856, 6, 128), "bf16", gated=True)[0] is None
    assert fused.moe(timing, 64, (2048, 768, 8, 128), "bf16", gated=False)[0] is None
    assert fused.moe(timing, 64, (2048, 768, 8, 128), "bf16", gated=True)[0] is not None


def test_deepseek_v3_decode_is_the_vllm_mla_module_and_the_fused_experts(capsys):
    """deepseek-v3 (61 layers, 58 of them MoE; fp8 128x128 blocks, bf16 KV), a decode step of 1 over 1024
    cached tokens under vLLM: the whole MLA module of each layer (every projection of its attention, the
    absorbed products and the attention: step = 1025 keys, linear between the measured 1024 and 2048) and
    the fused experts (1 token, measured) are looked up; nothing of them keeps its floor."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "deepseek-v3", "--context", "1k")
    assert "roofline floor" not in row["measured_coverage"]
    t = frame(root / "h100_sxm/mla/vllm/0.24.0/mla_generation_module_perf.parquet")
    t = t[(t.num_heads == 128) & (t.batch_size == 1) & (t.kv_cache_dtype == "bfloat16") & (t.gemm_type == "fp8_block")
          & (t.mla_dtype == "bfloat16")]
    lo, hi = (t[t.step == n].latency.min() * 1e-3 for n in (1024, 2048))
    module = 61 * (lo + (hi - lo) * 1 / 1024)
    floor = float(row["attn_proj_floor_time_s"]) + float(row["attention_floor_time_s"])
    assert float(row["attn_proj_time_s"]) + float(row["attention_time_s"]) == pytest.approx(max(module, floor),
                                                                                             rel=1e-9)
    m = moe_rows(root, (7168, 2048, 8, 256), "fp8_block")
    experts = 58 * m[m.num_tokens == 1].latency.min() * 1e-3
    assert float(row["experts_time_s"]) == pytest.approx(max(experts, float(row["experts_floor_time_s"])), rel=1e-9)


@pytest.mark.parametrize("engine, version", [("trtllm", "1.3.0rc20"), ("sglang", "0.5.14")])
def test_deepseek_v3_decode_looks_up_the_mla_kernel_and_absorbed_products(capsys, engine, version):
    """TensorRT-LLM and SGLang: the MLA decode kernel alone (isl + step = 1025 keys, linear between 1024 and
    2048) and the absorbed per-head products from mla_bmm (fp8, as the weights; one token, 128 heads)."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "deepseek-v3", "--context", "1k", "--engine", engine)
    g = frame(root / f"h100_sxm/mla/{engine}/{version}/generation_mla_perf.parquet")
    g = g[(g.num_heads == 128) & (g.batch_size == 1) & (g.kv_cache_dtype == "bfloat16")]
    lo, hi = (g[g.isl + g.step == n].latency.min() * 1e-3 for n in (1024, 2048))
    attention = 61 * (lo + (hi - lo) * 1 / 1024)
    assert float(row["attention_time_s"]) == pytest.approx(max(attention, float(row["attention_floor_time_s"])),
                                                           rel=1e-9)
    b = frame(root / f"h100_sxm/mla_bmm/{engine}/{version}/mla_bmm_perf.parquet")
    b = b[(b.num_heads == 128) & (b.num_tokens == 1) & (b.bmm_dtype == "fp8")]
    assert len(b[b.op_name == "mla_gen_pre"]) and len(b[b.op_name == "mla_gen_post"])
    coverage = row["measured_coverage"]
    assert "q_absorb" not in coverage and "v_absorb" not in coverage and "attention" not in coverage


def test_mla_of_another_shape_or_form_keeps_its_floor(capsys):
    """deepseek-v2-lite's MLA (d 2048, no query LoRA) is not the measured shape; deepseek-v3 decoding with
    --mla naive is not the form the engines run in a decode step: both keep the attention's floor."""
    tables()
    lite = measured_row(capsys, "decode", "-p", "deepseek-v2-lite", "--context", "1k")
    assert float(lite["attention_time_s"]) == float(lite["attention_floor_time_s"])
    assert "roofline floor (no table)" in lite["measured_coverage"]
    naive = measured_row(capsys, "decode", "-p", "deepseek-v3", "--context", "1k", "--mla", "naive")
    assert float(naive["attention_time_s"]) == float(naive["attention_floor_time_s"])


# --- the floor against every measured MoE and MLA shape --------------------------------------

DEVICES = {"h100": "h100_sxm", "h200": "h200_sxm"}
# weight dtype of a table -> (bytes a weight, bytes an activation, the peak it computes at): an 8-bit kernel
# computes in fp8 (as test_measured's GEMMs); 128x128 blocks' scales left out (a floor 0.02% lower)
WEIGHTS = {"bfloat16": (2, 2, "bf16"), "fp8": (1, 1, "fp8"), "fp8_block": (1, 1, "fp8")}


def gemm_floor(rows, fan_in, fan_out, uses, weight_bytes, act_bytes, peak, bw):
    """costcalc's projection: 2 rows uses fan_in fan_out FLOPs; its matrix (``uses`` slices of it: MLA's
    absorbed per-head products) read once, its rows in and out."""
    import numpy as np

    return np.maximum(2 * rows * uses * fan_in * fan_out / peak,
                      (uses * fan_in * fan_out * weight_bytes + rows * uses * (fan_in + fan_out) * act_bytes) / bw)


def experts_floor(tokens, hidden, inter, topk, touched, matrices, weight_bytes, act_bytes, peak, bw):
    """costcalc's routed experts: each of ``matrices`` products (3 gated, 2 not) runs tokens x topk rows and
    reads the ``touched`` experts' matrices."""
    import numpy as np

    return matrices * np.maximum(2 * tokens * topk * hidden * inter / peak,
                                 (touched * hidden * inter * weight_bytes
                                  + tokens * topk * (hidden + inter) * act_bytes) / bw)


def mla_attention_floor(batch, new, past, heads, absorbed, kv_bytes, peak, bw, chosen=None):
    """costcalc's MLA attention: naive, per head 192-wide scores and 128-wide values over per-head K and V
    (heads x 320 a key); absorbed, 576-wide scores and 512-wide values over the 576-wide latent a key. With
    ``chosen`` (DSA's k_I), a query attends to min(p, k_I) keys and a step reads that many (an uncached
    prompt, ``past`` 0, or a single step, ``new`` 1)."""
    import numpy as np

    qk, av = (576, 512) if absorbed else (192, 128)
    width = 576 if absorbed else heads * 320
    pairs, loaded = new * past + new * (new + 1) / 2, past + new
    if chosen is not None:
        k = chosen
        pairs = np.where(past > 0, np.minimum(past + 1, k),
                         np.where(new <= k, new * (new + 1) / 2, k * (k + 1) / 2 + (new - k) * k))
        loaded = np.where(past > 0, np.minimum(past + 1, k), new)
    flops = 2 * heads * (qk + av) * pairs * batch
    moved = batch * new * heads * (qk + av) * 2 + batch * loaded * width * kv_bytes \
        + batch * new * width * kv_bytes
    return np.maximum(flops / peak, moved / bw)


def indexer_floor(batch, new, past, weights, index_bytes, profile):
    """costcalc's lightning indexer of DeepSeek-V3.2 (64 heads of 128): its projections (wq_b from the query
    latent, wk and weights_proj from the hidden state) and its scores, 2 x 64 x 128 + 2 x 64 FLOPs a (query,
    legal key) pair, the queries and head weights in, every index key read, the new ones written."""
    weight_bytes, act_bytes, peak = weights
    gemm_peak, bw, rows = profile.peak(peak), profile.mem_bw, batch * new
    projections = gemm_floor(rows, 1536, 64 * 128, 1, weight_bytes, act_bytes, gemm_peak, bw) \
        + gemm_floor(rows, 7168, 128, 1, weight_bytes, act_bytes, gemm_peak, bw) \
        + gemm_floor(rows, 7168, 64, 1, weight_bytes, act_bytes, gemm_peak, bw)
    import numpy as np

    pairs = new * past + new * (new + 1) / 2
    moved = rows * (64 * 128 + 64) * 2 + batch * (past + new) * 128 * index_bytes + rows * 128 * index_bytes
    return projections + np.maximum((2 * 64 * 128 + 2 * 64) * pairs * batch / profile.peak("bf16"), moved / bw)


def mla_module_floor(batch, new, past, heads, absorbed, weights, kv_bytes, profile, chosen=None):
    """The operators vLLM's MLA module runs (DeepSeek-V3's projections, then the attention), each its floor
    (with ``chosen``, DSA's sparse attention; its indexer is ``indexer_floor``)."""
    weight_bytes, act_bytes, peak = weights
    gemm_peak, bw, rows = profile.peak(peak), profile.mem_bw, batch * new
    total = gemm_floor(rows, 7168, 1536, 1, weight_bytes, act_bytes, gemm_peak, bw) \
        + gemm_floor(rows, 1536, heads * 192, 1, weight_bytes, act_bytes, gemm_peak, bw) \
        + gemm_floor(rows, 7168, 576, 1, weight_bytes, act_bytes, gemm_peak, bw) \
        + gemm_floor(rows, heads * 128, 7168, 1, weight_bytes, act_bytes, gemm_peak, bw)
    if absorbed:
        total = total + gemm_floor(rows, 128, 512, heads, weight_bytes, act_bytes, gemm_peak, bw) \
            + gemm_floor(rows, 512, 128, heads, weight_bytes, act_bytes, gemm_peak, bw)
    else:
        total = total + gemm_floor(rows, 512, heads * 256, 1, weight_bytes, act_bytes, gemm_peak, bw)
    return total + mla_attention_floor(batch, new, past, heads, absorbed, kv_bytes, profile.peak("bf16"), bw,
                                       chosen)


def mla_spec(tmp_path: Path, heads: int):
    data = {"name": "shape", "d": 7168, "h_q": heads, "V": 64, "r_q": 1536, "r_kv": 512, "d_nope": 128,
            "d_rope": 64, "d_v": 128, "layers": [{"count": 1, "arch": "mla_q.moe", "E": 256, "k": 8, "m_e": 2048}],
            "source": {"note": "a test shape: DeepSeek-V3's MLA and experts, one layer"}}
    path = tmp_path / "shape.json"
    path.write_text(json.dumps(data))
    return presets.load_file(path)


@pytest.mark.parametrize("workload, values", [("prefill", {"B": 2, "S": 100}), ("decode", {"B": 3, "T": 500})])
def test_the_floor_formulas_are_costcalcs(tmp_path, workload, values):
    """The vectorised floors below agree with costcalc's own per-operator roofline (roofline.point)."""
    spec, h100 = mla_spec(tmp_path, 16), device("h100")
    ops = point(Query(spec, workload, Options(), Precision(), Machine(h100)), values, per_operator=True)["operators"]
    peak, bw = h100.peak("bf16"), h100.mem_bw
    batch, new, past = (values["B"], values["S"], 0) if workload == "prefill" else (values["B"], 1, values["T"])
    absorbed = workload == "decode"
    tokens = batch * new
    touched = float(experts_touched(256, 8, tokens, Routing.expected))
    assert sum(ops[f"experts.{p}_proj"]["time_s"] for p in ("gate", "up", "down")) == pytest.approx(
        float(experts_floor(tokens, 7168, 2048, 8, touched, 3, 2, 2, peak, bw)), rel=1e-12)
    assert ops["attention"]["time_s"] == pytest.approx(
        float(mla_attention_floor(batch, new, past, 16, absorbed, 2, peak, bw)), rel=1e-12)
    module = [o for o in fused.MLA_MODULE_OPS if o in ops]
    assert sum(ops[o]["time_s"] for o in module) == pytest.approx(
        float(mla_module_floor(batch, new, past, 16, absorbed, WEIGHTS["bfloat16"], 2, h100)), rel=1e-12)


def dsa_spec(tmp_path: Path, heads: int):
    data = {"name": "shape", "d": 7168, "h_q": heads, "V": 64, "r_q": 1536, "r_kv": 512, "d_nope": 128,
            "d_rope": 64, "d_v": 128, "h_I": 64, "d_I": 128, "k_I": 2048,
            "layers": [{"count": 1, "arch": "mla_q-sparse.dense", "m": 64}],
            "source": {"note": "a test shape: DeepSeek-V3.2's sparse MLA, one layer"}}
    path = tmp_path / "dsa.json"
    path.write_text(json.dumps(data))
    return presets.load_file(path)


@pytest.mark.parametrize("workload, values", [("prefill", {"B": 2, "S": 3000}), ("decode", {"B": 3, "T": 5000}),
                                              ("decode", {"B": 3, "T": 1000})])
def test_the_dsa_floor_formulas_are_costcalcs(tmp_path, workload, values):
    """DeepSeek-V3.2's sparse attention and indexer, past k_I = 2048 keys and short of it, as roofline.point."""
    h100 = device("h100")
    ops = point(Query(dsa_spec(tmp_path, 16), workload, Options(), Precision(), Machine(h100)), values,
                per_operator=True)["operators"]
    batch, new, past = (values["B"], values["S"], 0) if workload == "prefill" else (values["B"], 1, values["T"])
    absorbed = workload == "decode"
    module = [o for o in fused.MLA_MODULE_OPS if o in ops]
    assert sum(ops[o]["time_s"] for o in module) == pytest.approx(float(mla_module_floor(
        batch, new, past, 16, absorbed, WEIGHTS["bfloat16"], 2, h100, chosen=2048)), rel=1e-12)
    assert sum(ops[o]["time_s"] for o in fused.INDEXER_OPS) == pytest.approx(float(indexer_floor(
        batch, new, past, WEIGHTS["bfloat16"], 2, h100)), rel=1e-12)


def test_deepseek_v32_decode_is_the_vllm_dsa_module(capsys):
    """deepseek-v3.2 (61 sparse MLA layers; fp8 128x128 blocks, bf16 KV), a decode step of 1 over 8192 cached
    tokens under vLLM: the whole DSA module of each layer (projections, indexer, sparse attention) at 8193
    keys, linear between the measured 8192 and 16384, DeepSeek-V3.2's rows (not GLM-5's)."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "deepseek-v3.2", "--context", "8k")
    t = frame(root / "h100_sxm/sparse_attention/vllm/0.24.0/dsa_generation_module_perf.parquet")
    t = t[(t.model == fused.DSA_MODEL) & (t.num_heads == 128) & (t.batch_size == 1) & (t.kv_cache_dtype == "bfloat16")
          & (t.gemm_type == "fp8_block") & (t.mla_dtype == "bfloat16")]
    lo, hi = (t[t.step == n].latency.min() * 1e-3 for n in (8192, 16384))
    module = 61 * (lo + (hi - lo) * 1 / 8192)
    terms = ("attn_proj", "indexer_proj", "attention", "indexer")
    floor = sum(float(row[f"{x}_floor_time_s"]) for x in terms)
    assert sum(float(row[f"{x}_time_s"]) for x in terms) == pytest.approx(max(module, floor), rel=1e-9)
    assert "roofline floor" not in row["measured_coverage"]


def moe_violations(name: str) -> dict:
    """Every balanced one-device fused-MoE row of a device, in a dtype costcalc maps, below costcalc's floor
    under ``--routing expected``: table -> rows."""
    import numpy as np

    root, profile = tables(), device(name)
    out = {}
    for path in sorted((root / DEVICES[name] / "moe").glob("*/*/moe_perf.parquet")):
        t = frame(path)
        t = t[(t.moe_tp_size == 1) & (t.moe_ep_size == 1) & (t.distribution == "balanced")
              & t.moe_dtype.isin(list(WEIGHTS))]
        cols = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts")
        T, d, m, k, E = (t[c].to_numpy() for c in cols)
        touched = {key: float(experts_touched(int(key[0]), int(key[1]), int(key[2]), Routing.expected))
                   for key in set(zip(E, k, T))}
        n = np.array([touched[key] for key in zip(E, k, T)])
        matrices = np.array([2 if shape in fused.NON_GATED else 3 for shape in zip(d, m, k, E)])
        wb, ab, peak = (t.moe_dtype.map({k: v[i] for k, v in WEIGHTS.items()}).to_numpy() for i in range(3))
        peak = np.array([profile.peak(p) for p in peak])
        floor = experts_floor(T, d, m, k, n, matrices, wb.astype(float), ab.astype(float), peak, profile.mem_bw)
        out[str(path.relative_to(root))] = t[t.latency.to_numpy() * 1e-3 < floor]
    return out


def mla_violations(name: str) -> dict:
    """Every MLA kernel, absorbed-product and vLLM module row of a device (bf16 attention compute) below
    costcalc's floor: table -> rows."""
    import numpy as np

    root, profile = tables(), device(name)
    bw, out = profile.mem_bw, {}
    for path in sorted((root / DEVICES[name] / "mla").glob("*/*/*.parquet")):
        kind = path.name.removesuffix("_perf.parquet")
        if kind not in ("context_mla", "generation_mla") and not (kind.startswith("mla_") and "vllm" in str(path)):
            continue
        t = frame(path)
        t = t[t.mla_dtype == "bfloat16"]
        b, isl, step, h = (t[c].to_numpy(float) for c in ("batch_size", "isl", "step", "num_heads"))
        kv = np.where((t.kv_cache_dtype == "fp8").to_numpy(), 1, 2)
        generation = "generation" in kind
        if kind.endswith("module"):         # vLLM: step = the keys a step reads, its own included
            new, past = (1 + 0 * b, step - 1) if generation else (isl, 0 * isl)
            floor = 0 * b
            for gemm in ("bfloat16", "fp8_block"):
                mine = (t.gemm_type == gemm).to_numpy()
                floor = np.where(mine, mla_module_floor(b, new, past, h, generation, WEIGHTS[gemm], kv, profile),
                                 floor)
        else:                               # a kernel: isl + step keys (generation)
            new, past = (1 + 0 * b, isl + step - 1) if generation else (isl, 0 * isl)
            floor = mla_attention_floor(b, new, past, h, generation, kv, profile.peak("bf16"), bw)
        out[str(path.relative_to(root))] = t[t.latency.to_numpy() * 1e-3 < floor]
    for path in sorted((root / DEVICES[name] / "sparse_attention" / "vllm").glob("*/dsa_*_module_perf.parquet")):
        t = frame(path)
        t = t[(t.mla_dtype == "bfloat16") & (t.model == fused.DSA_MODEL) & ((t.step == 0) | (t.op_name != "dsa_context_module"))]
        b, isl, step, h = (t[c].to_numpy(float) for c in ("batch_size", "isl", "step", "num_heads"))
        kv = np.where((t.kv_cache_dtype == "fp8").to_numpy(), 1, 2)
        generation = "generation" in path.name
        new, past = (1 + 0 * b, step - 1) if generation else (isl, 0 * isl)
        floor = 0 * b
        for gemm in ("bfloat16", "fp8_block"):      # the index keys in fp8 (1 byte: the lower floor)
            mine = (t.gemm_type == gemm).to_numpy()
            both = mla_module_floor(b, new, past, h, generation, WEIGHTS[gemm], kv, profile, chosen=2048) \
                + indexer_floor(b, new, past, WEIGHTS[gemm], 1, profile)
            floor = np.where(mine, both, floor)
        out[str(path.relative_to(root))] = t[t.latency.to_numpy() * 1e-3 < floor]
    for path in sorted((root / DEVICES[name] / "mla_bmm").glob("*/*/mla_bmm_perf.parquet")):
        t = frame(path)
        pre = (t.op_name == "mla_gen_pre").to_numpy()
        fp8 = (t.bmm_dtype == "fp8").to_numpy()
        rows, h = t.num_tokens.to_numpy(float), t.num_heads.to_numpy(float)
        wb = np.where(fp8, 1, 2)
        peak = np.where(fp8, profile.peak("fp8"), profile.peak("bf16"))
        floor = gemm_floor(rows, np.where(pre, 128, 512), np.where(pre, 512, 128), h, wb, wb, peak, bw)
        out[str(path.relative_to(root))] = t[t.latency.to_numpy() * 1e-3 < floor]
    return out


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_the_floor_is_at_or_below_every_measured_moe_shape(name):
    """Every balanced one-device fused-MoE row takes at least costcalc's floor (expected routing, which reads
    no more experts than the collector's balanced routing does), with one exception pinned here so that any
    other fails: DeepSeek-V3's shape (7168, 2048, top-8 of 256) in fp8 128x128 blocks under vLLM 0.24.0 and
    SGLang 0.5.14 (not vLLM 0.19.0 nor SGLang 0.5.10): 2 to 1536 tokens at down to 0.58 of the floor, weight
    bytes far beyond L2 -- unexplained (docs/cost-model.md, Measured time); the estimate is raised to the floor."""
    for table, bad in moe_violations(name).items():
        if bad.empty:
            continue
        assert table.split("/")[2:4] in (["vllm", "0.24.0"], ["sglang", "0.5.14"]), (table, bad.head().to_dict("records"))
        shapes = set(zip(bad.moe_dtype, bad.hidden_size, bad.inter_size, bad.topk, bad.num_experts))
        assert shapes == {("fp8_block", 7168, 2048, 8, 256)}, (table, shapes)
        assert bad.num_tokens.max() <= 1536


L2_BYTES = 50 * 10**6   # H100 SXM5 and H200: 50 MB of L2 (NVIDIA H100 Tensor Core GPU Architecture whitepaper)


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_the_floor_is_at_or_below_every_measured_mla_shape(name):
    """Every MLA attention kernel (TensorRT-LLM, SGLang), absorbed product (mla_bmm), vLLM MLA module and
    DeepSeek-V3.2 DSA module row takes at least costcalc's floor for those operators, except bf16 absorbed products whose whole working set
    (the heads' slices, the rows in and out) fits the 50 MB L2 -- timed again and again on the same tensors, as
    test_measured's small GEMMs, they are read from a warm L2 at more than HBM's bandwidth."""
    for table, bad in mla_violations(name).items():
        if bad.empty:
            continue
        assert "mla_bmm" in table and set(bad.bmm_dtype) == {"bfloat16"}, (table, bad.head().to_dict("records"))
        working = bad.num_heads * (128 * 512 + bad.num_tokens * (128 + 512)) * 2
        assert (working <= L2_BYTES).all(), (table, bad[working > L2_BYTES].head().to_dict("records"))


# --- Gated DeltaNet ------------------------------------------------------------------------

def gdn_rows(root: Path, phase: str, op: str, shape: tuple):
    """H100 vLLM 0.24.0's rows of one GDN kernel (scan or conv) at (key heads, key dim, value heads, value dim)."""
    t = frame(root / "h100_sxm/linear_attention/vllm/0.24.0/gdn_perf.parquet")
    hk, dk, hv, dv = shape
    return t[(t.phase == phase) & t.kernel_source.str.contains(fused.GDN_KERNELS[op]) & (t.num_k_heads == hk)
             & (t.head_k_dim == dk) & (t.num_v_heads == hv) & (t.head_v_dim == dv) & (t.d_conv == 4)]


def test_gated_deltanet_decode_is_the_recurrent_kernels(capsys):
    """qwen3.5-27b (48 Gated DeltaNet layers: 16 key heads, 48 value heads, of 128; 4 taps), a decode step of
    one sequence: the recurrent scan and the convolution update, each one table row a layer."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "qwen3.5-27b", "--context", "1k")
    for op in ("scan", "conv"):
        t = gdn_rows(root, "generation", op, (16, 128, 48, 128))
        kernel = t[t.batch_size == 1].latency.min() * 1e-3
        assert float(row[f"{op}_time_s"]) == pytest.approx(max(48 * kernel, float(row[f"{op}_floor_time_s"])),
                                                           rel=1e-9)
    assert "scan" not in row["measured_coverage"] and "conv" not in row["measured_coverage"]


def test_gated_deltanet_prefill_is_bilinear_in_batch_and_length(capsys):
    """3 prompts of 3000 tokens: between the measured batches 2 and 4 and lengths 2048 and 4096."""
    root = tables()
    row = measured_row(capsys, "prefill", "-p", "qwen3.5-27b", "--seq", "3000", "--batch", "3")
    t = gdn_rows(root, "context", "scan", (16, 128, 48, 128))

    def at(b, n):
        return t[(t.batch_size == b) & (t.seq_len == n)].latency.min() * 1e-3

    def along(b):
        return at(b, 2048) + (at(b, 4096) - at(b, 2048)) * (3000 - 2048) / 2048
    expected = 48 * (along(2) + (along(4) - along(2)) / 2)
    assert float(row["scan_time_s"]) == pytest.approx(max(expected, float(row["scan_floor_time_s"])), rel=1e-9)


def gdn_floors(batch, new, past, hk, dk, hv, dv, taps, profile, state_bytes=4, channels=None):
    """costcalc's Gated DeltaNet scan and convolution (recurrent, bf16 activations, a state of
    ``state_bytes`` an element): the scan 6 hv dk dv FLOPs a token, its inputs and output in and out, the
    state written (and read over a cache); the convolution (of 2 hk dk + hv dv channels unless given) 2 taps
    FLOPs a channel and token, the channels in and out, its taps - 1 kept positions written (and read over a
    cache)."""
    import numpy as np

    tokens, cached = batch * new, np.where(past > 0, 2, 1)
    peak, bw = profile.peak("bf16"), profile.mem_bw
    io = 2 * hk * dk + 2 * hv * dv + 2 * hv
    scan = np.maximum(6 * hv * dk * dv * tokens / peak,
                      (tokens * io * 2 + cached * batch * hv * dk * dv * state_bytes) / bw)
    channels = 2 * hk * dk + hv * dv if channels is None else channels
    conv = np.maximum(2 * taps * channels * tokens / peak,
                      (tokens * channels * 2 * 2 + cached * batch * channels * (taps - 1) * 2) / bw)
    return scan, conv


@pytest.mark.parametrize("workload, values", [("prefill", {"B": 2, "S": 100}), ("decode", {"B": 3, "T": 500})])
def test_the_gated_deltanet_floors_are_costcalcs(tmp_path, workload, values):
    data = {"name": "shape", "d": 2048, "V": 64, "state_dtype": "fp32", "source": {"note": "a test shape"},
            "layers": [{"count": 1, "arch": "gdn.none", "h_lk": 16, "h_lv": 32, "d_lk": 128, "d_lv": 128, "K_c": 4,
                        "Q_c": 64}]}
    path = tmp_path / "gdn.json"
    path.write_text(json.dumps(data))
    h100 = device("h100")
    ops = point(Query(presets.load_file(path), workload, Options(), Precision(), Machine(h100)), values,
                per_operator=True)["operators"]
    batch, new, past = (values["B"], values["S"], 0) if workload == "prefill" else (values["B"], 1, values["T"])
    scan, conv = gdn_floors(batch, new, past, 16, 128, 32, 128, 4, h100)
    assert ops["scan"]["time_s"] == pytest.approx(float(scan), rel=1e-12)
    assert ops["conv"]["time_s"] == pytest.approx(float(conv), rel=1e-12)


# the state the collectors keep (collector/<engine>/collect_gdn.py): vLLM 0.24.0 allocates it in bf16, SGLang
# 0.5.14 in fp32 (its serving default); TensorRT-LLM's allocates every tensor in bf16
GDN_STATE_BYTES = {"vllm": 2, "sglang": 4, "trtllm": 2}


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_the_floor_is_at_or_below_every_measured_gated_deltanet_shape(name):
    """Every Gated DeltaNet scan and convolution row (context: an uncached prompt; generation: a step over a
    cache) takes at least costcalc's floor for that kernel -- with the state the collector kept, and
    TensorRT-LLM's convolution over the key channels only, as its collector runs it -- except one set, pinned:
    on H100, SGLang 0.5.14's recurrent decode scan at 4 to 256 sequences (64 rows, at worst 0.912 of the
    floor with its fp32 state read and written once a step): unexplained (docs/cost-model.md, Measured time)."""
    import numpy as np

    root, profile = tables(), device(name)
    for path in sorted((root / DEVICES[name] / "linear_attention").glob("*/*/gdn_perf.parquet")):
        engine = path.parent.parent.name
        t = frame(path)
        b, n, hk, dk, hv, dv, taps = (t[c].to_numpy(float) for c in ("batch_size", "seq_len", "num_k_heads",
                                      "head_k_dim", "num_v_heads", "head_v_dim", "d_conv"))
        generation = (t.phase == "generation").to_numpy()
        scan, conv = gdn_floors(b, np.where(generation, 1, n), np.where(generation, 1, 0), hk, dk, hv, dv, taps,
                                profile, GDN_STATE_BYTES[engine],
                                hk * dk if engine in fused.GDN_KEYS_ONLY_CONV else None)
        floor = np.where(t.kernel_source.str.contains("conv1d").to_numpy(), conv, scan)
        bad = t[t.latency.to_numpy() * 1e-3 < floor]
        if engine == "sglang" and name == "h100":
            assert set(bad.phase) <= {"generation"} and set(bad.kernel_source) <= {
                "fused_recurrent_gated_delta_rule_packed_decode"}, bad.head().to_dict("records")
            assert len(bad) == 64
            continue
        assert bad.empty, (str(path.relative_to(root)), bad.head().to_dict("records"))


def test_experts_on_a_tensor_parallel_device_are_its_shards_kernel(capsys):
    """--tp 2 without expert parallelism: each device runs every expert at half its width (768 / 2 = 384), the
    collector's local_inter_size at moe_tp_size 2; with --ep 2 the experts keep their floor (expert
    parallelism is not looked up) and the row says so."""
    root = tables()
    row = measured_row(capsys, "decode", "-p", "qwen3-30b-a3b", "--context", "1k", "--batch", "64", "--tp", "2")
    t = frame(root / "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet")
    t = t[(t.moe_ep_size == 1) & (t.distribution == "balanced") & (t.moe_dtype == "bfloat16") & (t.hidden_size == 2048)
          & (t.inter_size // t.moe_tp_size == 384) & (t.topk == 8) & (t.num_experts == 128) & (t.num_tokens == 64)]
    assert set(t.moe_tp_size) == {2}
    kernel = t.latency.min() * 1e-3
    assert float(row["experts_time_s"]) == pytest.approx(max(48 * kernel, float(row["experts_floor_time_s"])),
                                                         rel=1e-9)
    ep = measured_row(capsys, "decode", "-p", "qwen3-30b-a3b", "--context", "1k", "--batch", "64", "--tp", "2",
                      "--ep", "2")
    assert float(ep["experts_time_s"]) == float(ep["experts_floor_time_s"])
    assert "experts.gate_proj" in ep["measured_coverage"]
