"""Training under a layout (issue 20): per-device FLOPs, collectives, memory and time of ``train``.

The expected numbers are written by hand from the sharding rules (Megatron's column/row split, 2
FLOPs a multiply-add, forward x3), the ZeRO paper's memory counts (arXiv 1910.02054: 16 Psi,
4 Psi + 12 Psi/n, 2 Psi + 14 Psi/n, 16 Psi/n), the ring factors of ``collectives.factor`` and
Korthikanti et al.'s per-layer activation breakdown (arXiv 2205.05198, section 4.1), not read back.
"""
import json
import os
from datetime import timedelta
from fractions import Fraction

import pytest

from costcalc import collectives, devices, params, presets
from costcalc.evaluate import Options, Query
from costcalc.spec import from_dict
from costcalc import calc
from costcalc.training import OPTIMIZERS, Plan, Recompute

from cli_run import one_error, run
from ranks import spawn

from train_rows import LLAMA, row


def llama_psi(tp):
    """Llama-3.1-8B's matrices on one of tp devices: q, o (d x d), k, v (d x 1024), gate, up, down
    (d x m), all / tp; the embedding and the untied LM head d x V / tp each."""
    c = LLAMA
    kv = c["h_kv"] * c["d_h"]
    layer = (2 * c["d"] * c["d"] + 2 * c["d"] * kv + 3 * c["d"] * c["m"]) // tp
    return c["L"] * layer + 2 * c["d"] * c["V"] // tp


def llama_train_device(B, S, tp):
    """A Llama-3.1-8B training step on one of tp devices (logits at every position), by hand."""
    c, T = LLAMA, B * S
    kv = c["h_kv"] * c["d_h"]
    proj = 2 * T * c["d"] * (2 * c["d"] + 2 * kv) // tp
    ffn = 3 * 2 * T * c["d"] * c["m"] // tp
    attention = 2 * 2 * B * (c["h"] // tp) * c["d_h"] * S * (S + 1) // 2
    return 3 * (c["L"] * (proj + ffn + attention) + 2 * T * c["d"] * c["V"] // tp)


def test_flops_per_device_by_hand_and_times_devices_is_the_whole():
    got = row("llama-3.1-8b", batch=8, seq=128, tp=2, dp=4)
    assert got["layout"] == "tp2.dp4" and got["devices"] == 8
    assert got["flops_per_device"] == llama_train_device(8 // 4, 128, 2)
    assert got["flops_per_device"] * 8 == got["total_flops"] and got["replicated_flops"] == 0


def test_replicated_work_named_in_the_identity():
    # Mixtral under tp2: the router (d x E) runs whole on both devices of a replica
    d, E, L, B, S = 4096, 8, 32, 4, 64
    got = row("mixtral-8x7b", batch=B, seq=S, tp=2, dp=2)
    router = 3 * L * 2 * B * S * d * E          # the train step's router FLOPs, whole batch
    assert got["replicated_flops"] == router    # each of 2 tp devices runs its replica's router: 2x
    assert got["flops_per_device"] * 4 == got["total_flops"] + router
    # ep = tp x dp without tp: every device routes its own replica's tokens, nothing replicated
    got = row("mixtral-8x7b", batch=B, seq=S, ep=4, dp=4)
    assert got["flops_per_device"] * 4 == got["total_flops"] and got["replicated_flops"] == 0


def test_parameters_per_device_by_hand():
    assert row("llama-3.1-8b", tp=2)["params_per_device"] == llama_psi(2)
    spec = presets.load("llama-3.1-8b")
    assert row(spec, tp=1, dp=2)["params_per_device"] == params.parameters(spec)["total_params"] == llama_psi(1)


def test_ddp_all_reduce_moves_the_device_gradients():
    got = row("llama-3.1-8b", tp=2, dp=4)
    ddp = [c for c in got["collectives"] if c["where"].startswith("dp:")]
    assert ddp == [{"op": "all_reduce", "where": "dp: gradients (DDP)", "count": 1, "bytes": llama_psi(2) * 2}]


def wire(collectives_list, ranks, prefix="dp:"):
    """Bytes each rank sends each way: count x factor(n) x message, from collectives.factor."""
    return sum(c["count"] * collectives.factor(c["op"], ranks) * c["bytes"]
               for c in collectives_list if c["where"].startswith(prefix))


@pytest.mark.parametrize("n", [2, 8])
def test_zero3_moves_one_and_a_half_times_ddp(n):
    ddp = wire(row("llama-3.1-8b", dp=n)["collectives"], n)
    zero3 = wire(row("llama-3.1-8b", dp=n, zero=3)["collectives"], n)
    assert ddp == 2 * Fraction(n - 1, n) * llama_psi(1) * 2     # 2(n-1)/n x Psi x 2 bytes
    assert zero3 == Fraction(3, 2) * ddp                        # (n-1)/n x 3 against 2(n-1)/n
    for stage in (1, 2):                                        # ZeRO-1/2: reduce-scatter + all-gather = DDP's
        assert wire(row("llama-3.1-8b", dp=n, zero=stage)["collectives"], n) == ddp


@pytest.mark.parametrize("n", [2, 8])
def test_zero_stage_memory_against_the_zero_paper(n):
    psi = llama_psi(1)    # divides by 2 and 8: the paper's counts exactly
    expected = {0: 16 * psi, 1: 4 * psi + 12 * psi // n, 2: 2 * psi + 14 * psi // n, 3: 16 * psi // n}
    for stage, total in expected.items():
        got = row("llama-3.1-8b", dp=n, zero=stage)
        assert got["weight_bytes_per_device"] + got["grad_bytes_per_device"] + got["optimizer_bytes_per_device"] \
            == total
        assert got["total_bytes_per_device"] == total + got["activation_bytes_per_device"]


def test_recompute_full_below_selective_below_none():
    got = {r: row("llama-3.1-8b", Plan(Recompute(r)), tp=2)["activation_bytes_per_device"]
           for r in ("none", "selective", "full")}
    assert got["full"] < got["selective"] < got["none"]
    # full: each layer's input (d, bf16) and the LM head's input, B S tokens
    assert got["full"] == (LLAMA["L"] + 1) * 8 * 256 * LLAMA["d"] * 2


GPT = dict(L=2, d=1024, h=16, m=4096, V=32000)


def gpt():
    """A GPT-style block as Korthikanti et al. count it: MHA, a non-gated MLP of 4h."""
    return from_dict({"name": "gpt-test", "arch": "gqa.mlp", "L": GPT["L"], "d": GPT["d"], "h_q": GPT["h"],
                      "h_kv": GPT["h"], "d_h": GPT["d"] // GPT["h"], "m": GPT["m"], "V": GPT["V"]}, origin="test")


@pytest.mark.parametrize("tp,sp", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_activations_against_korthikanti(tp, sp):
    """Korthikanti et al. per layer, in bytes (bf16): attention 11sbh + 5as^2b, MLP 19sbh, two
    layer norms 4sbh: 34sbh + 5as^2b; with tp: sbh(10 + 24/t + 5as/(ht)), with sp too: sbh/t x
    (34 + 5as/h); selective recomputation drops the 5as^2b. costcalc's convention counts neither
    the layer norms' inputs (4sbh), nor the two dropout masks (2sbh), nor GeLU's input (8sbh; /t
    under tp), and saves flash attention's logsumexp (fp32 per head: 4as b) instead of the s^2
    tensors. The LM head's input (2sbh, /t under sp) is outside the layers."""
    s, b, h, a, L = 512, 2, GPT["d"], GPT["h"], GPT["L"]
    sbh = Fraction(s * b * h)
    t = Fraction(tp)
    if sp:
        korthikanti = sbh / t * 34
        dropped = sbh / t * (4 + 2 + 8)
    else:
        korthikanti = sbh * (10 + 24 / t)
        dropped = sbh * (4 + 2 + 8 / t)
    head = 2 * sbh / (t if sp else 1)
    plan = lambda r: Plan(Recompute(r))
    selective = row(gpt(), plan("selective"), batch=b, seq=s, tp=tp, sp=sp)["activation_bytes_per_device"]
    none = row(gpt(), plan("none"), batch=b, seq=s, tp=tp, sp=sp)["activation_bytes_per_device"]
    full = row(gpt(), plan("full"), batch=b, seq=s, tp=tp, sp=sp)["activation_bytes_per_device"]
    assert selective == L * (korthikanti - dropped) + head
    assert none - selective == L * 4 * (a // tp) * s * b
    assert full == L * 2 * sbh / (t if sp else 1) + head      # Korthikanti's full recomputation: 2sbhL


def test_tp_collectives_forward_and_backward():
    B, S, d, L = 8, 256, LLAMA["d"], LLAMA["L"]
    got = row("llama-3.1-8b", batch=B, seq=S, tp=2, dp=2)
    message = B // 2 * S * d * 2
    tp = [c for c in got["collectives"] if c["where"].startswith("tp")]
    assert [(c["op"], c["count"], c["bytes"]) for c in tp] == [
        ("all_reduce", 2 * L + 1, message), ("all_reduce", 2 * L + 1, message),   # 2 + 2 a layer, embedding, head
        ("all_reduce", 3, B // 2 * S * 4)]                                         # cross-entropy, fp32 a token
    sp = [c for c in row("llama-3.1-8b", batch=B, seq=S, tp=2, dp=2, sp=True)["collectives"]
          if c["where"].startswith("tp") and "cross-entropy" not in c["where"]]
    assert [c["op"] for c in sp] == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter", "all_gather"]
    assert all(c["count"] == 2 * L + 1 and c["bytes"] == message for c in sp)
    # reduce-scatter + all-gather move what one all-reduce moves
    assert wire(sp[:4], 2, "tp") == wire(tp[:2], 2, "tp")


def test_ep_all_to_alls_forward_and_backward():
    B, S, d, k, L = 4, 64, 4096, 2, 32
    got = row("mixtral-8x7b", batch=B, seq=S, tp=2, ep=2)
    ep = [c for c in got["collectives"] if c["where"].startswith("ep")]
    assert len(ep) == 4 and all(c["op"] == "all_to_all" and c["count"] == L for c in ep)
    assert all(c["bytes"] == B * S // 2 * k * d * 2 for c in ep)     # each device's tokens, k copies of d


def test_time_on_a_device_dp_across_domains():
    h100 = devices.load("h100")
    B, S = 16, 128
    got = row("llama-3.1-8b", Plan(device=h100), batch=B, seq=S, tp=8, dp=2, overlap="none")
    assert got["device"] == "h100" and got["overlap"] == "none"
    assert got["compute_time_s"] == pytest.approx(got["flops_per_device"] / 989.5e12)
    up, out = h100.scale_up, h100.scale_out
    tp_time = dp_time = 0.0
    for c in got["collectives"]:
        if c["where"].startswith("tp"):     # one HGX domain of 8: NVLink, 450 GB/s each way
            algorithm = up.all_reduce if c["op"] == "all_reduce" else "ring"     # the profile's, for an all-reduce
            tp_time += c["count"] * (up.latency_s + float(collectives.factor(c["op"], 8, algorithm)) * c["bytes"] / 450e9)
        else:                               # dp ranks strided by tp: 16 devices span two domains -> the NIC, a ring
            dp_time += c["count"] * (max(up.latency_s, out.latency_s)
                                     + float(collectives.factor(c["op"], 2)) * c["bytes"] / 50e9)
    assert got["comm_time_s"] == pytest.approx(tp_time + dp_time)
    assert got["time_s"] == pytest.approx(got["compute_time_s"] + got["comm_time_s"])
    full = row("llama-3.1-8b", Plan(device=h100), batch=B, seq=S, tp=8, dp=2)       # full: the default
    assert full["overlap"] == "full" and full["time_s"] == pytest.approx(max(full["compute_time_s"], full["comm_time_s"]))


def test_fits_against_the_device_memory():
    h100 = devices.load("h100")
    assert row("llama-3.1-8b", Plan(device=h100), batch=8, seq=256, tp=1, dp=8, zero=3)["fits"] is True
    assert row("llama-3.1-8b", Plan(device=h100), batch=1, seq=256)["fits"] is False    # 16 x 8B > 80 GB


def test_calc_answer_of_a_train_query_on_a_layout_is_the_training_answer():
    query = Query(presets.load("llama-3.1-8b"), "train", Options(logits="all", tp=2, dp=2))
    got = calc.answer(query, batch=[8], seq=[128])
    assert got["flops_per_device"] == [llama_train_device(4, 128, 2)]
    assert got["params_per_device"] == [llama_psi(2)]


TODAY = ["preset", "workload", "convention", "batch", "seq", "logits", "attn_proj_flops", "ffn_flops",
         "linear_flops", "attention_flops", "lm_head_flops", "total_flops", "rule_6p_flops", "ratio_to_6p"]


@pytest.mark.parametrize("extra", [[], ["--tp", "1"], ["--dp", "1", "--ep", "1"]])
def test_single_device_train_prints_what_it_printed(capsys, extra):
    code, out, err = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "4k", "-b", "8", "-f", "json", *extra)
    assert code == 0 and err == ""
    assert list(json.loads(out)[0]) == TODAY


def test_cli_layout_columns(capsys):
    code, out, err = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "256", "-b", "8", "--tp", "2", "--dp", "4",
                         "--zero", "2", "--recompute", "selective", "--device", "h100", "-f", "json")
    assert code == 0, err
    got = json.loads(out)[0]
    for key in ("layout", "devices", "flops_per_device", "comm_bytes_per_device", "collectives",
                "weight_bytes_per_device", "grad_bytes_per_device", "optimizer_bytes_per_device",
                "activation_bytes_per_device", "total_bytes_per_device", "fits", "compute_time_s", "comm_time_s",
                "time_s", "overlap"):
        assert key in got
    assert got["layout"] == "tp2.dp4" and got["zero"] == 2 and got["recompute"] == "selective"
    assert got["optimizer"] == "adam" and OPTIMIZERS["adam"].state_bits == 96


@pytest.mark.parametrize("args,message", [
    (["--dp", "3"], "--dp 3: batch 8 does not divide by 3"),
    (["--tp", "2", "--pp", "2", "--dp", "2", "--zero", "3"], "ZeRO-3 with pipeline parallelism is not modelled"),
    (["--zero", "1"], "--zero 1 shards over the data-parallel devices: it needs --dp > 1"),
    (["--dp", "2", "--zero", "4"], "--zero is a ZeRO stage 0, 1, 2 or 3"),
    (["--sp"], "--sp (sequence parallel) splits the tensor-parallel all-reduces: it needs --tp > 1"),
    (["--tp", "3"], "does not divide by 3"),
    (["--recompute", "some"], "'some' is not one of 'none', 'selective', 'full'"),
    (["--optimizer", "sgd"], "'sgd' is not one of 'adam'"),
])
def test_one_line_errors(capsys, args, message):
    code, out, err = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "256", "-b", "8", *args)
    assert code != 0 and out == ""
    assert one_error(err, message)


def test_unmodelled_layers_refused_by_name(capsys):
    code, out, err = run(capsys, "train", "-p", "qwen3-next-80b-a3b", "--seq", "256", "--recompute", "full")
    assert code != 0 and out == "" and one_error(err, "qwen3-next-80b-a3b's gdn.moe_shared_gate layers")


def test_recomputation_adds_a_forward_to_the_time():
    B, S, tp = 8, 256, 2
    c, T = LLAMA, B * S
    head = 3 * 2 * T * c["d"] * c["V"] // tp               # the LM head's train FLOPs on a device
    attention = 3 * c["L"] * 2 * 2 * B * (c["h"] // tp) * c["d_h"] * S * (S + 1) // 2
    h100 = devices.load("h100")
    full = row("llama-3.1-8b", Plan(Recompute.full, device=h100), batch=B, seq=S, tp=tp)
    assert full["recompute_flops"] == (llama_train_device(B, S, tp) - head) // 3     # the layers' forward again
    assert full["compute_time_s"] == pytest.approx((full["flops_per_device"] + full["recompute_flops"]) / 989.5e12)
    assert row("llama-3.1-8b", Plan(Recompute.selective), batch=B, seq=S, tp=tp)["recompute_flops"] == attention // 3
    assert row("llama-3.1-8b", batch=B, seq=S, tp=tp)["recompute_flops"] == 0


# --- a real engine: DDP and FSDP2 on two gloo ranks (slow) ---------------------------------------

SMALL = {"name": "train-gloo", "arch": "gqa.dense", "L": 2, "d": 64, "h_q": 4, "h_kv": 2, "d_h": 16, "m": 128,
         "V": 96}
D, PER_RANK, SEQ = 2, 2, 8


def _engine_rank(rank: int, folder: str, port: int) -> None:
    """Three training steps of the verify decoder in bf16 on this rank's B/D sequences: DDP, FSDP2
    with every unit resharded after forward (the root included), and FSDP2's default (the root
    kept unsharded). Every c10d collective is recorded with its whole array (the larger buffer)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from costcalc.verify.build import from_spec
    from costcalc.verify.model import causal_mask

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if str(func).startswith("c10d."):
                sizes = [t.numel() * t.element_size() for t in tree_leaves((args, kwargs))
                         if isinstance(t, torch.Tensor)]
                self.seen.append([str(func).split(".")[1], max(sizes)])
            return out

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=D,
                            timeout=timedelta(seconds=60))
    try:
        spec = from_dict(SMALL, origin="test")
        tokens = torch.randint(0, SMALL["V"], (PER_RANK, SEQ), generator=torch.Generator().manual_seed(rank))
        found = {}
        for case in ("ddp", "fsdp_reshard_all", "fsdp_default"):
            model = from_spec(spec, dtype=torch.bfloat16)
            norms = sum(p.numel() for p in model.parameters() if p.dim() == 1)
            if case == "ddp":
                model = torch.nn.parallel.DistributedDataParallel(model)
            else:
                for layer in model.layers:
                    fully_shard(layer, reshard_after_forward=True)
                fully_shard(model, reshard_after_forward=True if case == "fsdp_reshard_all" else None)
            record = Record()
            with record:
                model(tokens, causal_mask(SEQ), logits="all").float().sum().backward()
            found[case] = record.seen
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
            json.dump({"found": found, "norms": norms}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_and_fsdp2_on_two_gloo_ranks_move_costcalcs_bytes(tmp_path):
    """The bytes DDP and FSDP2 put into their collectives, per rank, against costcalc's ``--dp 2``
    (``--zero 3``) collectives: equal once the norms' weights -- which costcalc does not count
    (matrices only), counted here from the torch model -- are added; FSDP2's default root (not
    resharded after forward) gathers the embedding and LM head once, not twice: the difference named."""
    pytest.importorskip("torch")
    spawn(_engine_rank, tmp_path, D)
    spec = from_dict(SMALL, origin="test")
    ddp = row(spec, batch=D * PER_RANK, seq=SEQ, dp=D)
    zero3 = row(spec, batch=D * PER_RANK, seq=SEQ, dp=D, zero=3)
    root = 2 * SMALL["d"] * SMALL["V"] * 2              # the embedding and the untied LM head, bf16

    def total(rows, op, prefix="dp:"):
        return sum(c["count"] * c["bytes"] for c in rows["collectives"] if c["op"] == op and c["where"].startswith(prefix))

    for rank in range(D):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        norms = got["norms"] * 2                         # bf16 bytes of the 1-D weights costcalc leaves out

        def moved(case, op):
            return sum(size for name, size in got["found"][case] if name.startswith(op))

        assert moved("ddp", "allreduce") == total(ddp, "all_reduce") + norms
        assert moved("fsdp_reshard_all", "_allgather") == total(zero3, "all_gather") + 2 * norms
        assert moved("fsdp_reshard_all", "_reduce_scatter") == total(zero3, "reduce_scatter") + norms
        # FSDP2's default: the root unit (embedding, LM head, the final norm's d weights) gathered once
        assert moved("fsdp_default", "_allgather") == total(zero3, "all_gather") + 2 * norms - root - SMALL["d"] * 2
