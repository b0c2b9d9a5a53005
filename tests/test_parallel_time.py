"""Bytes and time per device under tensor, expert and data parallelism (issue 20).

Expected numbers are written by hand from the sharding rules (Megatron column/row splits: every
weight matrix's columns or rows / tp; one KV head a device where h_kv < tp, as vLLM replicates them;
the router whole on every device; under ep each device holds E / ep whole experts) and the shapes in
the presets, bf16 = 2 bytes; the link numbers are read from the device profile's JSON text, and the
collective time is alpha + factor(n) S / B with the ring factors 2(n-1)/n and (n-1)/n.
"""
import json
from fractions import Fraction
from pathlib import Path

import pytest

from costcalc import calc, devices, parallel, presets
from costcalc.evaluate import Options, Query
from costcalc.layout import device_spec
from costcalc.roofline import Machine, Precision

from cli_run import one_error, run

PROFILES = Path(__file__).resolve().parent.parent / "presets" / "devices"
LLAMA = dict(L=32, d=4096, h_q=32, h_kv=8, d_h=128, m=14336, V=128256)            # llama-3.1-8b
MIXTRAL = dict(L=32, d=4096, h_q=32, h_kv=8, d_h=128, m_e=14336, E=8, k=2, V=32000)  # mixtral-8x7b


def row(preset, workload, device="h100", routing="expected", **given):
    layout = {k: given.pop(k) for k in ("tp", "ep", "dp", "overlap") if k in given}
    machine = Machine(devices.load(device)) if device else None
    query = Query(presets.load(preset), workload, Options(**layout), Precision(routing=routing), machine)
    table = calc.answer(query, **{k: [v] for k, v in given.items()})
    return {k: v[0] for k, v in table.items()}


def profile(name):
    """The device profile as its JSON text says (not through costcalc's reader)."""
    return json.loads((PROFILES / f"{name}.json").read_text())["interconnect"]


def llama_weight_bytes(tp):
    """Llama-3.1-8B's bf16 weights one of tp devices reads in a forward: q/o by columns/rows, k/v one
    KV head a device where h_kv < tp, gate/up/down, the vocabulary-parallel LM head."""
    p = LLAMA
    kv_heads = max(p["h_kv"] // tp, 1)
    layer = 2 * p["d"] * p["h_q"] // tp * p["d_h"] + 2 * p["d"] * kv_heads * p["d_h"] + 3 * p["d"] * p["m"] // tp
    return 2 * (p["L"] * layer + p["d"] * p["V"] // tp)


def test_dense_weight_bytes_per_device_are_the_shards():
    whole = llama_weight_bytes(1)
    got = row("llama-3.1-8b", "decode", tp=2, batch=1, context=100)
    assert got["weight_bytes"] == whole                      # the whole model's column is kept as it was
    assert got["weight_bytes_per_device"] == llama_weight_bytes(2)
    assert got["weight_bytes_per_device"] * 2 == whole       # every matrix splits (h_kv 8 >= tp 2)
    at16 = row("llama-3.1-8b", "decode", tp=16, batch=1, context=100)
    kv = 2 * LLAMA["L"] * LLAMA["d"] * LLAMA["d_h"] * 2      # k and v of one KV head, all layers, bf16
    # one KV head on every device: 16 heads' k/v read where the model has 8
    assert at16["weight_bytes_per_device"] * 16 == whole + (16 - LLAMA["h_kv"]) * kv


def test_replicated_router_bytes_times_tp_minus_1():
    """Mixtral at tp2 without ep: experts split by width, the router whole on both devices."""
    p = MIXTRAL
    got = row("mixtral-8x7b", "decode", tp=2, batch=1, context=100)
    router = p["L"] * p["d"] * p["E"] * 2
    assert got["weight_bytes_per_device"] * 2 == got["weight_bytes"] + router * (2 - 1)
    assert got["weight_bytes_per_device"] == mixtral_device_weights(2, 1, p["k"])   # one token: its k experts


def mixtral_device_weights(tp, ep, touched):
    """Mixtral's bf16 weights one device reads: attention split by tp (h_kv 8 >= tp), the router whole,
    ``touched`` experts of its own, whole (ep) or at 1/tp of their width (no ep), the LM head / tp."""
    p = MIXTRAL
    width = p["m_e"] if ep > 1 else p["m_e"] // tp
    attention = 2 * p["d"] * p["h_q"] // tp * p["d_h"] + 2 * p["d"] * p["h_kv"] // tp * p["d_h"]
    return round(2 * (p["L"] * (attention + p["d"] * p["E"] + touched * 3 * p["d"] * width) + p["d"] * p["V"] // tp))


@pytest.mark.parametrize("routing", ["expected", "worst"])
def test_ep_device_reads_its_share_of_the_experts_touched(routing):
    p, B = MIXTRAL, 3
    got = row("mixtral-8x7b", "decode", routing=routing, tp=2, ep=2, batch=B, context=100)
    if routing == "expected":   # E (1 - (1 - k/E)^n) over the whole model, spread evenly over ep devices
        touched = p["E"] * (1 - Fraction(p["E"] - p["k"], p["E"]) ** B) / 2
    else:                       # the busiest device: every routed pair on a new expert of its own
        touched = min(Fraction(p["E"], 2), B * p["k"])
    assert got["weight_bytes_per_device"] == mixtral_device_weights(2, 2, touched)


def llama_kv_read(B, T, heads):
    """K and V of ``heads`` KV heads read by a decode step over T cached tokens (T + 1 keys), bf16."""
    return 2 * LLAMA["L"] * B * (T + 1) * heads * LLAMA["d_h"] * 2


def test_kv_read_per_device_split_or_replicated():
    B, T = 2, 300
    whole = llama_kv_read(B, T, LLAMA["h_kv"])
    got = row("llama-3.1-8b", "decode", tp=4, batch=B, context=T)
    assert got["kv_read_bytes"] == whole
    assert got["kv_read_bytes_per_device"] * 4 == whole                     # h_kv 8 >= tp 4: split
    at16 = row("llama-3.1-8b", "decode", tp=16, batch=B, context=T)
    # h_kv 8 < tp 16: one KV head a device, each head's cache kept on 16 / 8 devices
    assert at16["kv_read_bytes_per_device"] == whole // LLAMA["h_kv"] == llama_kv_read(B, T, 1)
    assert at16["kv_read_bytes_per_device"] * 16 == whole * 16 // LLAMA["h_kv"]


FACTORS = {"all_reduce": lambda n: Fraction(2 * (n - 1), n), "all_gather": lambda n: Fraction(n - 1, n),
           "all_to_all": lambda n: Fraction(n - 1, n)}
# an all-reduce the switch reduces: each rank's S up once, the result down once (tests/test_collectives.py)
IN_NETWORK = lambda n: Fraction(1)          # noqa: E731


def comm_by_hand(collectives, groups, link):
    """Sum over collectives of count x (alpha + factor(n) S / B); n the collective's group; an all-reduce
    under the link's ``all_reduce`` algorithm as the profile names it (the ring where it names none)."""
    total = 0.0
    for c in collectives:
        n = groups[c["op"]]
        factor = IN_NETWORK if c["op"] == "all_reduce" and link.get("all_reduce") == "in_network" else FACTORS[c["op"]]
        total += c["count"] * (link["latency_s"] + float(factor(n) * c["bytes"]) / link["bytes_per_s_each_way"])
    return total


@pytest.mark.parametrize("preset, tp, ep, inputs", [
    ("llama-3.1-8b", 4, 1, dict(batch=3, context=500)),
    ("mixtral-8x7b", 2, 2, dict(batch=5, context=64)),
])
def test_comm_time_is_alpha_plus_factor_bytes_over_bandwidth(preset, tp, ep, inputs):
    got = row(preset, "decode", device="h200", tp=tp, ep=ep, **inputs)
    up = profile("h200")["scale_up"]
    groups = {"all_reduce": tp, "all_gather": tp, "all_to_all": ep}
    assert got["comm_time_s"] == pytest.approx(comm_by_hand(got["collectives"], groups, up), rel=1e-12)
    assert got["links"].startswith(f"tp{tp}") and f"{up['bytes_per_s_each_way']:.3g} B/s each way" in got["links"]


def test_a_group_larger_than_the_domain_runs_across_domains():
    """tp 16 over 8-GPU NVLink domains: the NIC's bandwidth, the larger of the two latencies."""
    got = row("llama-3.1-8b", "decode", tp=16, batch=1, context=10)
    up, out = profile("h100")["scale_up"], profile("h100")["scale_out"]
    assert up["domain_gpus"] < 16
    slow = {"bytes_per_s_each_way": out["bytes_per_s_each_way"], "latency_s": max(up["latency_s"], out["latency_s"])}
    groups = {"all_reduce": 16, "all_gather": 16}
    assert got["comm_time_s"] == pytest.approx(comm_by_hand(got["collectives"], groups, slow), rel=1e-12)
    assert "across domains" in got["links"]


def test_overlap_full_takes_the_larger_none_adds():
    none = row("mixtral-8x7b", "prefill", tp=2, ep=2, overlap="none", batch=2, seq=300)
    full = row("mixtral-8x7b", "prefill", tp=2, ep=2, batch=2, seq=300)       # full: the default (a floor)
    roofline = sum(v for k, v in none.items() if k.endswith("_time_s") and k not in ("time_s", "comm_time_s",
                                                                                        "compute_time_s",
                                                                                        "memory_time_s"))
    assert none["overlap"] == "none" and full["overlap"] == "full"
    assert none["comm_time_s"] == full["comm_time_s"] > 0
    assert none["time_s"] == pytest.approx(roofline + none["comm_time_s"], rel=1e-12)
    assert full["time_s"] == pytest.approx(max(roofline, full["comm_time_s"]), rel=1e-12)
    assert full["time_s"] <= none["time_s"]
    assert none["compute_time_s"] <= roofline <= none["compute_time_s"] + none["memory_time_s"]


def test_device_times_are_its_own_flops_over_the_peak():
    """A compute-bound prefill: one device's compute time is its FLOPs over the peak (no replicated
    work at tp2 with h_kv 8), 1/tp of the single device's."""
    B, S = 4, 2048
    one = row("llama-3.1-8b", "prefill", batch=B, seq=S)
    two = row("llama-3.1-8b", "prefill", tp=2, batch=B, seq=S)
    peak = json.loads((PROFILES / "h100.json").read_text())["peak_flops"]["bf16"]
    assert two["compute_time_s"] == pytest.approx(two["flops_per_device"] / peak, rel=1e-12)
    assert two["compute_time_s"] == pytest.approx(one["compute_time_s"] / 2, rel=1e-12)
    assert two["total_bytes"] == one["total_bytes"]      # the whole model's bytes stay beside


@pytest.mark.parametrize("args", [
    ["decode", "-p", "mixtral-8x7b", "--context", "1k", "--batch", "4", "--device", "h100", "--kv-dtype", "fp8",
     "-f", "json"],
    ["chunked", "-p", "llama-3.1-8b", "--seq", "1k", "--chunk", "256", "--device", "h200", "-f", "csv"],
    ["prefill", "-p", "toy", "--seq", "64", "--weight-dtype", "int8", "-f", "json"],
])
def test_one_device_prints_what_it_printed(capsys, args):
    code, today, _ = run(capsys, *args)
    code1, again, _ = run(capsys, *args, "--tp", "1", "--dp", "1", "--overlap", "full")
    assert code == code1 == 0 and today == again
    for name in ("layout", "comm_time_s", "overlap", "_per_device"):
        assert name not in today


KEYS = ("flops_per_device", "weight_bytes_per_device", "kv_read_bytes_per_device", "total_bytes_per_device",
        "compute_time_s", "memory_time_s", "comm_time_s", "time_s", "collectives")


@pytest.mark.parametrize("ep", [1, 2])
def test_dp_device_is_a_replica_at_B_over_D(ep):
    B, D = 8, 2
    replicas = row("mixtral-8x7b", "decode", tp=2, ep=ep, dp=D, batch=B, context=700)
    alone = row("mixtral-8x7b", "decode", tp=2, ep=ep, batch=B // D, context=700)
    assert replicas["devices"] == 2 * D and replicas["layout"] == f"tp2.ep{ep}.dp2".replace(".ep1", "")
    assert {k: replicas[k] for k in KEYS} == {k: alone[k] for k in KEYS}
    assert replicas["total_flops"] == 2 * alone["total_flops"]     # the whole model's B sequences


def test_ep_over_tp_times_dp():
    """vLLM's expert parallel with data-parallel attention: the experts over all tp x dp devices, each
    dispatching its own tokens; every replica's tokens routed to every device's experts."""
    p, B, tp, D = MIXTRAL, 8, 2, 2
    ep = tp * D
    got = row("mixtral-8x7b", "decode", device="h200", tp=tp, ep=ep, dp=D, batch=B, context=50)
    a2a = [c for c in got["collectives"] if c["op"] == "all_to_all"]
    share = -(-(B // D) // tp)      # a replica's B/D tokens, over its tp devices
    assert [c["where"] for c in a2a] == ["experts dispatch", "experts combine"]
    assert all(c["bytes"] == share * p["k"] * p["d"] * 2 and c["count"] == p["L"] for c in a2a)
    groups = {"all_reduce": tp, "all_gather": tp, "all_to_all": ep}        # the all-to-all over tp x dp
    assert got["comm_time_s"] == pytest.approx(comm_by_hand(got["collectives"], groups, profile("h200")["scale_up"]),
                                               rel=1e-12)
    assert "ep4" in got["links"]
    touched = p["E"] * (1 - Fraction(p["E"] - p["k"], p["E"]) ** B) / ep   # all B tokens reach its E/ep experts
    assert got["weight_bytes_per_device"] == mixtral_device_weights(tp, ep, touched)
    router = p["L"] * 2 * B * p["d"] * p["E"]         # run on every tp device of a replica: tp - 1 extra
    assert got["flops_per_device"] * ep == got["total_flops"] + router * (tp - 1)


def test_generate_rates_come_from_the_layouts_times():
    B, S, N = 2, 128, 9
    query = Query(presets.load("mixtral-8x7b"), "generate", Options(tp=2, ep=2), Precision(),
                  Machine(devices.load("h200")))
    t = calc.generation(query, [B], [S], [N])
    pre, dec, tot = (dict(zip(t, col)) for col in zip(*t.values()))
    assert tot["ttft_s"] == pre["time_s"]
    assert tot["tpot_s"] == pytest.approx(dec["time_s"] / (N - 1), rel=1e-12)
    assert tot["tokens_per_s"] == pytest.approx(N / (pre["time_s"] + dec["time_s"]), rel=1e-12)
    assert tot["batch_tokens_per_s"] == pytest.approx(B * N / (pre["time_s"] + dec["time_s"]), rel=1e-12)
    for key in ("compute_time_s", "memory_time_s", "comm_time_s", "time_s", "total_bytes_per_device"):
        assert tot[key] == pytest.approx(pre[key] + dec[key], rel=1e-12)
    # the prefill row is a prefill on the layout; the decode phase's all-reduces N-1 steps of one token each
    alone = row("mixtral-8x7b", "prefill", device="h200", tp=2, ep=2, batch=B, seq=S)
    assert pre["time_s"] == alone["time_s"] and pre["comm_time_s"] == alone["comm_time_s"]
    groups = {"all_reduce": 2, "all_gather": 2, "all_to_all": 2}
    assert dec["comm_time_s"] == pytest.approx(comm_by_hand(dec["collectives"], groups, profile("h200")["scale_up"]),
                                               rel=1e-12)


def test_chunked_on_a_layout_sums_its_chunks():
    query = Query(presets.load("llama-3.1-8b"), "chunked", Options(tp=2), Precision(), Machine(devices.load("h100")))
    t = calc.schedule(query, seq=1000, chunk=256, prefix=24, batch=2)
    rows = [dict(zip(t, col)) for col in zip(*t.values())]
    chunks, total, single = rows[:-2], rows[-2], rows[-1]
    for key in ("flops_per_device", "weight_bytes_per_device", "comm_time_s", "time_s", "comm_bytes_per_device"):
        assert total[key] == pytest.approx(sum(r[key] for r in chunks), rel=1e-12)
    assert total["flops_per_device"] * 2 == total["total_flops"]
    gathers = [c for r in chunks for c in r["collectives"] if c["op"] == "all_gather"]
    assert len(gathers) == 1 and gathers[0] in chunks[-1]["collectives"]    # the last chunk alone runs the LM head
    alone = row("llama-3.1-8b", "cached_prefill", tp=2, batch=2, chunk=1000, prefix=24)
    assert {k: single[k] for k in KEYS} == {k: alone[k] for k in KEYS}


def test_device_traffic_takes_the_groups_a_device_holds():
    spec = presets.load("mixtral-8x7b")
    query = Query(spec, "decode", Options(tp=2, ep=2), Precision(), Machine(devices.load("h100")))
    point = {"B": 4, "T": 100}
    own = parallel.device_traffic(query, point)
    assert own == parallel.device_traffic(query, point, device_spec(spec, query.options.layout))
    ops = own["operators"]
    assert sum(o["flops"] for o in ops.values()) == row("mixtral-8x7b", "decode", tp=2, ep=2, batch=4,
                                                        context=100)["flops_per_device"]
    assert sum(o["time_s"] for o in ops.values()) == pytest.approx(own["time_s"], rel=1e-12)
    assert round(sum(o["bytes"] for o in ops.values())) == own["total_bytes"]


def test_deepseek_v3_generate_on_8_h200(capsys):
    comm = {}
    for extra in ([], ["--ep", "8"]):
        code, out, err = run(capsys, "generate", "-p", "deepseek-v3", "--prompt", "2k", "--new", "256", "--device", "h200",
                             "--tp", "8", *extra, "-f", "json")
        assert code == 0, err
        pre, dec, tot = json.loads(out)
        assert tot["layout"] == "tp8" + (".ep8" if extra else "") and tot["devices"] == 8
        assert 0 < tot["ttft_s"] == pre["time_s"] and tot["tpot_s"] > 0 and tot["overlap"] == "full"
        assert all(r["comm_time_s"] > 0 and r["compute_time_s"] > 0 and r["memory_time_s"] > 0 for r in (pre, dec))
        # the largest of one device's times
        assert dec["bound"] == ("communication" if dec["comm_time_s"] > dec["memory_time_s"] else "memory")
        comm[bool(extra)] = dec["comm_time_s"]
        # a decode step reads at least its share of the weights: 1/8 of the whole model's, at most all of them
        assert dec["weight_bytes"] / 8 <= dec["weight_bytes_per_device"] < dec["weight_bytes"]
    assert comm[True] > comm[False]         # ep8 adds each MoE layer's two all-to-alls to tp8's all-reduces


def test_no_interconnect_is_refused(tmp_path, capsys):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({"name": "bare", "peak_flops": {"bf16": 1e15}, "mem_bw": 3e12, "mem_bytes": 80e9}))
    code, _, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "8", "--tp", "2", "--device-file", str(path))
    assert code != 0 and one_error(err, "device bare: no interconnect.scale_up"), err


@pytest.mark.parametrize("args, message", [
    (["decode", "-p", "mixtral-8x7b", "--context", "8", "--batch", "3", "--tp", "2", "--dp", "2"],
     "--dp 2: batch 3 does not divide by 2"),
    (["generate", "-p", "llama-3.1-8b", "--prompt", "8", "--new", "2", "--batch", "1,2", "--dp", "2", "--device", "h100"],
     "--dp 2: batch 1 does not divide by 2"),
])
def test_errors_are_one_line(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code != 0 and one_error(err, message), err


def test_each_group_on_its_own_link():
    """tp 8 inside one 8-GPU domain, the experts over tp x dp = 16 devices across two: the all-reduces
    on NVLink, the all-to-alls on the NIC (the slowest hop, the larger latency)."""
    got = row("deepseek-v3", "decode", device="h200", tp=8, ep=16, dp=2, batch=2, context=100)
    up, out = profile("h200")["scale_up"], profile("h200")["scale_out"]
    across = {"bytes_per_s_each_way": out["bytes_per_s_each_way"], "latency_s": max(up["latency_s"], out["latency_s"])}
    inside = [c for c in got["collectives"] if c["op"] != "all_to_all"]
    a2a = [c for c in got["collectives"] if c["op"] == "all_to_all"]
    assert a2a and inside
    expected = comm_by_hand(inside, {"all_reduce": 8, "all_gather": 8}, up) + \
        comm_by_hand(a2a, {"all_to_all": 16}, across)
    assert got["comm_time_s"] == pytest.approx(expected, rel=1e-12)
    assert got["links"].startswith("tp8: scale_up") and "ep16: scale_out across domains" in got["links"]


def test_bound_says_communication_where_the_collectives_take_longest(capsys):
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "-t", "4k", "--tp", "16", "--device", "h100",
                         "-f", "json")
    assert code == 0, err      # 8 KV heads over 16: replicated
    row = json.loads(out)[0]
    assert row["comm_time_s"] > max(row["compute_time_s"], row["memory_time_s"]) and row["bound"] == "communication"
    code, out, _ = run(capsys, "decode", "-p", "llama-3.1-8b", "-t", "4k", "--tp", "2", "--batch", "64",
                       "--device", "h100", "-f", "json")
    row = json.loads(out)[0]
    assert row["memory_time_s"] > row["comm_time_s"] and row["bound"] == "memory"
