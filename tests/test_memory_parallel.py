"""memory per device under a layout (--tp/--ep/--pp/--dp) and the smallest layout that fits (fits_on):
each per-device number held to the whole model's, or to bytes derived here by hand from the shapes."""
import json

import pytest

from cli_run import one_error, run
from costcalc import devices, memory, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Query
from costcalc.layout import Layout
from costcalc.roofline import Machine, Precision

H100, H200 = Machine(devices.load("h100")), Machine(devices.load("h200"))
BF16 = Precision("bf16")   # every matrix and the cache in bf16: 2 bytes an element


def row(name, batch, context, machine=H100, precision=BF16, **layout):
    query = Query(presets.load(name), "decode", memory.SERVING, precision, machine)
    return memory.fit(query, batch, context, layout=Layout(**layout))


def llama_70b_bytes(batch, context):
    """Llama-3.1-70B in bf16 by hand: per layer q, k, v, o, gate, up, down; the embedding and the
    untied LM head; K and V of h_kv heads per token per layer."""
    L, d, h_q, h_kv, d_h, m, V = 80, 8192, 64, 8, 128, 28672, 128256
    weights = 2 * (L * (d * h_q * d_h + 2 * d * h_kv * d_h + h_q * d_h * d + 3 * d * m) + 2 * V * d)
    return weights, 2 * L * batch * context * 2 * h_kv * d_h


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_llama_shards_add_up_to_the_whole_model_with_nothing_replicated(tp):
    weights, cache = llama_70b_bytes(8, 32768)
    one = row("llama-3.1-70b", 8, 32768)
    assert (one["weight_bytes_resident"], one["kv_cache_bytes"]) == (weights, cache)
    got = row("llama-3.1-70b", 8, 32768, tp=tp)
    assert got["weight_bytes_per_device"] * tp == weights     # embedding and LM head split too (vocab-parallel)
    assert got["kv_cache_bytes_per_device"] * tp == cache     # h_kv = 8 >= tp: the heads split
    assert got["total_bytes_per_device"] == got["weight_bytes_per_device"] + got["kv_cache_bytes_per_device"]
    assert (got["layout"], got["devices"]) == (f"tp{tp}", tp)


def test_kv_heads_fewer_than_tp_are_replicated_one_a_device():
    # GLM-4-9B-0414: 2 KV heads, tp 4: each device holds one head's K/V projections and cache (vLLM's replication)
    L, d, h_kv, d_h = 40, 4096, 2, 128
    whole = row("glm-4-9b-0414", 2, 1000)
    got = row("glm-4-9b-0414", 2, 1000, tp=4)
    assert got["kv_cache_bytes_per_device"] == 2 * L * 2 * 1000 * 2 * 1 * d_h           # one head, by hand
    assert got["kv_cache_bytes_per_device"] * 4 == whole["kv_cache_bytes"] * 4 // h_kv  # tp/h_kv copies of each
    kv_proj = 2 * L * 2 * d * h_kv * d_h                      # k_proj and v_proj, the whole model's, in bf16
    replicated = kv_proj * 4 // h_kv - kv_proj                # 4 devices hold tp/h_kv = 2 copies of them
    assert got["weight_bytes_per_device"] * 4 == whole["weight_bytes_resident"] + replicated


def test_mla_latent_is_whole_on_every_rank_and_its_down_projections_and_router_are_replicated():
    spec = presets.load("deepseek-v3")
    s = spec.groups[-1].sizes              # its MoE layers' sizes (the dense ones share the attention's)
    L, moe = spec["L"], sum(g.count for g in spec.groups if g.block.ffn == "moe")
    d, r_q, r_kv, d_rope, E = s["d"], s["r_q"], s["r_kv"], s["d_rope"], s["E"]
    whole = row("deepseek-v3", 2, 4096, H200)
    got = row("deepseek-v3", 2, 4096, H200, tp=8)
    assert got["kv_cache_bytes_per_device"] == whole["kv_cache_bytes"] == L * 2 * 4096 * (r_kv + d_rope) * 2
    replicated = 2 * (L * (d * r_q + d * (r_kv + d_rope)) + moe * d * E)   # q_a_proj, kv_a_proj_with_mqa, router
    assert got["weight_bytes_per_device"] * 8 == whole["weight_bytes_resident"] + 7 * replicated


def test_expert_parallel_holds_e_over_ep_whole_experts():
    spec = presets.load("deepseek-v3")
    s = spec.groups[-1].sizes
    moe = sum(g.count for g in spec.groups if g.block.ffn == "moe")
    expert = 3 * s["d"] * s["m_e"] * 2                         # gate, up, down of one expert in bf16
    tp8 = row("deepseek-v3", 8, 4096, H200, tp=8)
    ep8 = row("deepseek-v3", 8, 4096, H200, tp=8, ep=8)
    assert ep8["weight_bytes_per_device"] == tp8["weight_bytes_per_device"]   # E/8 whole = E at m_e/8, in bf16
    tp2 = row("deepseek-v3", 8, 4096, H200, tp=2)
    wide = row("deepseek-v3", 8, 4096, H200, tp=2, ep=8, dp=4)               # experts over tp x dp devices
    assert wide["weight_bytes_per_device"] == (tp2["weight_bytes_per_device"] - moe * s["E"] * expert // 2
                                               + moe * s["E"] // 8 * expert)
    assert wide["kv_cache_bytes_per_device"] * 4 == tp2["kv_cache_bytes_per_device"]   # B/D sequences a replica
    assert wide["devices"] == 8


@pytest.mark.parametrize("pp", [2, 3, 7])
def test_pipeline_stages_add_up_to_the_whole_model(capsys, pp):
    weights, cache = llama_70b_bytes(4, 8192)
    code, out, err = run(capsys, "memory", "-p", "llama-3.1-70b", "-b", "4", "-t", "8k", "--device", "h100",
                         "--weight-dtype", "bf16", "--pp", str(pp), "-f", "json")
    assert code == 0, err
    got = json.loads(out)[0]
    stages = got["stages"]
    assert len(stages) == pp and sum(st["layers"] for st in stages) == 80
    assert sum(st["weight_bytes"] for st in stages) == weights
    assert sum(st["kv_cache_bytes"] for st in stages) == cache
    V, d = 128256, 8192
    top = max(stages, key=lambda st: st["total_bytes"])
    assert got["total_bytes_per_device"] == top["total_bytes"]
    assert got["weight_bytes_per_device"] == top["weight_bytes"]
    # the first stage holds the embedding, the last the LM head: the same size here (V x d each)
    per_layer = [(st["weight_bytes"] - 2 * V * d) / st["layers"] for st in (stages[0], stages[-1])]
    assert per_layer[0] == per_layer[1] == (weights - 4 * V * d) / 80


def test_tied_embeddings_under_pp_are_held_by_the_first_and_the_last_stage():
    spec = presets.load("granite-3.1-8b-base")
    assert spec.tied_embeddings
    V, d = spec["V"], spec["d"]
    whole = row("granite-3.1-8b-base", 1, 1000)
    stages = memory.per_device(Query(spec, "decode", memory.SERVING, BF16, H100), Layout(pp=2),
                               memory.Held(1, 1000, whole["usable_bytes"]))
    assert sum(st["weight_bytes"] for st in stages) == whole["weight_bytes_resident"] + 2 * V * d   # a second table
    assert sum(st["kv_cache_bytes"] for st in stages) == whole["kv_cache_bytes"]


def test_one_device_layout_is_the_single_row():
    for name, machine in (("llama-3.1-70b", H100), ("deepseek-v3", H200), ("gemma-2-9b", H100)):
        one = row(name, 3, 5000, machine)
        query = Query(presets.load(name), "decode", memory.SERVING, BF16, machine)
        (stage,) = memory.per_device(query, Layout(), memory.Held(3, 5000, one["usable_bytes"]))
        assert (stage["weight_bytes"], stage["kv_cache_bytes"], stage["total_bytes"], stage["max_batch"],
                stage["max_context"]) == (one["weight_bytes_resident"], one["kv_cache_bytes"], one["total_bytes"],
                                          one["max_batch"], one["max_context"])


@pytest.mark.parametrize("layout", [dict(tp=4), dict(tp=2, pp=2), dict(tp=4, dp=2), dict(tp=8, pp=3)])
def test_max_batch_and_max_context_are_the_largest_that_fit(layout):
    dp = layout.get("dp", 1)
    got = row("llama-3.1-70b", 8, 32768, **layout)
    best = got["max_batch"]
    assert best > 0 and best % dp == 0
    assert row("llama-3.1-70b", best, 32768, **layout)["fits"]
    assert not row("llama-3.1-70b", best + dp, 32768, **layout)["fits"]
    longest = got["max_context"]
    assert row("llama-3.1-70b", 8, longest, **layout)["fits"]
    assert not row("llama-3.1-70b", 8, longest + 1, **layout)["fits"]


def candidates_before(spec, found: Layout, domain: int):
    """Every layout of fewer devices (tp up to the domain, tp x pp; ep 1 or tp), the valid ones."""
    out = []
    for tp in range(1, domain + 1):
        for pp in range(1, found.devices // tp + 1):
            if tp * pp >= found.devices:
                continue
            for ep in {1, tp}:
                layout = Layout(tp=tp, ep=ep, pp=pp)
                try:
                    memory.check(spec, layout, memory.SERVING)
                except CostcalcError:
                    continue
                out.append(layout)
    return out


@pytest.mark.parametrize("name, machine, batch, context, expect", [
    ("llama-3.1-70b", H100, 8, 32768, "tp4"), ("llama-3.1-70b", H200, 1, 8192, "tp2"),
    ("qwen3-30b-a3b", H100, 64, 32768, None), ("llama-3.1-8b", H100, 1, 1024, "tp1")])
def test_the_smallest_layout_fits_and_none_of_fewer_devices_does(name, machine, batch, context, expect):
    spec = presets.load(name)
    got = row(name, batch, context, machine)
    found = memory.search(Query(spec, "decode", memory.SERVING, BF16, machine),
                          memory.Held(batch, context, got["usable_bytes"]))
    assert got["fits_on"] == found.label
    if expect is not None:
        assert found.label == expect
    layout = found.fits
    assert row(name, batch, context, machine, tp=layout.tp, ep=layout.ep, pp=layout.pp)["fits"]
    smaller = candidates_before(spec, layout, machine.device.scale_up.domain)
    assert all(not row(name, batch, context, machine, tp=c.tp, ep=c.ep, pp=c.pp)["fits"] for c in smaller)
    # the same count, an earlier layout in the order (more tp) does not fit either
    assert (layout.devices == 1) == (found.short is None)


def test_tp2_does_not_fit_and_says_what_does(capsys):
    code, out, err = run(capsys, "memory", "-p", "llama-3.1-70b", "-b", "8", "-t", "32k", "--device", "h100",
                         "--tp", "2")
    assert code == 0, err
    assert "fits                       False" in out and "fits_on                    tp4" in out
    assert ("llama-3.1-70b, batch 8, context 32768 on h100: tp4 fits (4 devices), tp1.pp3 does not, nor any "
            "layout of fewer devices" in " ".join(out.split()))        # the note, unwrapped
    code, out, err = run(capsys, "memory", "-p", "llama-3.1-70b", "-b", "1", "-t", "8k", "--device", "h200",
                         "--tp", "1")
    assert code == 0, err
    assert "h200: tp2 fits (2 devices), tp1 does not\n" in out and "fits_on                tp2" in out


def test_a_single_device_row_keeps_its_columns_with_fits_on_last(capsys):
    code, out, err = run(capsys, "memory", "-p", "llama-3.1-70b", "-b", "8", "-t", "32k", "--device", "h200",
                         "-f", "json")
    got = json.loads(out)[0]
    assert list(got) == ["preset", "device", "batch", "context", "weight_dtype", "weight_dtype_source", "kv_dtype",
                         "reserve", "weight_bytes_resident", "kv_cache_bytes", "total_bytes", "device_bytes",
                         "usable_bytes", "fits", "max_batch", "max_context", "fits_on"]


@pytest.mark.parametrize("args, message", [
    (["-p", "llama-3.1-70b", "-b", "3", "--dp", "2"], "--dp 2: batch 3 does not divide by 2"),
    (["-p", "llama-3.1-70b", "--tp", "3"], "query head count h_q 64 does not divide by 3"),
    (["-p", "llama-3.1-70b", "--ep", "2", "--tp", "2"], "has no MoE layers"),
    (["-p", "llama-3.1-70b", "--ep", "4", "--tp", "2"], "--ep 4 with --tp 2"),
    (["-p", "llama-3.1-8b", "--pp", "40"], "--pp 40: more stages than the model's 32 layers"),
    (["-p", "lfm2-1.2b", "--tp", "3"], "FFN width m 8192 does not divide by 3"),
    (["-p", "falcon-h1-34b-base", "--tp", "4"], "2 Mamba-2 groups do not divide by 4 and are not 1"),
    (["-p", "deepseek-v3", "--draft", "mtp", "--tp", "8", "--pp", "2"], "--draft mtp with --pp is not modelled"),
    (["-p", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--draft-tp", "2"], "--draft-tp 2: a draft model runs at "
                                                                           "the target's tensor parallelism (1)")])
def test_bad_layouts_are_one_line_errors(capsys, args, message):
    code, out, err = run(capsys, "memory", *args, "-t", "1k", "--device", "h200")
    assert code != 0 and one_error(err, message), err


def test_a_table_shows_each_stage_readably_and_json_lists_them(capsys):
    args = ["memory", "-p", "llama-3.1-70b", "-b", "8", "-t", "32k", "--device", "h100", "--tp", "2", "--pp", "2"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("stages"))
    assert line.split(None, 1)[1] == "40 layers 56.75 GB; 40 layers 56.75 GB"
    code, out, err = run(capsys, *args, "-f", "json")
    stages = json.loads(out)[0]["stages"]
    assert [st["layers"] for st in stages] == [40, 40] and stages[0]["total_bytes"] == stages[1]["total_bytes"]
