"""A Megatron-split SwiGLU MLP run by two processes with torch.distributed (gloo, CPU): each rank's
executed FLOPs (FlopCounterMode on its local shards) and the bytes of the all-reduce it runs, held
to costcalc's per-device counts of the toy model's FFN at --tp 2. Slow (two processes importing torch)."""
import json
import os
from datetime import timedelta

import pytest

from costcalc import presets
from costcalc.evaluate import Options, Query
from costcalc.parallel import collectives, operator_columns

from ranks import spawn

TP, B, S = 2, 3, 5
FFN = ("gate_proj", "up_proj", "down_proj")


def _rank(rank: int, folder: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=TP,
                            timeout=timedelta(seconds=60))
    try:
        sizes = presets.load("toy").groups[0].sizes
        d, m = sizes["d"], sizes["m"]
        torch.manual_seed(0)       # the same whole weights on every rank; each keeps its shard
        gate, up, down = torch.randn(m, d), torch.randn(m, d), torch.randn(d, m)
        x = torch.randn(B * S, d)
        own = slice(rank * m // TP, (rank + 1) * m // TP)
        with FlopCounterMode(display=False) as counter:   # column split of gate/up, row split of down
            h = torch.nn.functional.silu(x @ gate[own].T) * (x @ up[own].T)
            y = h @ down[:, own].T
        partial = y.to(torch.bfloat16)
        sent = partial.numel() * partial.element_size()
        dist.all_reduce(partial)
        whole = (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T
        close = torch.allclose(partial.float(), whole, rtol=0.05, atol=0.05 * whole.abs().max().item())
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
            json.dump({"flops": counter.get_total_flops(), "all_reduce_bytes": sent, "close": close}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_megatron_mlp_on_two_gloo_ranks(tmp_path):
    torch = pytest.importorskip("torch")
    spawn(_rank, tmp_path, TP, deadline_s=120)
    query = Query(presets.load("toy"), "prefill", Options(tp=TP))
    L = presets.load("toy").groups[0].count
    point = {"B": [B], "S": [S]}
    per_device = operator_columns(query, point, 1, sharded=True)
    expected = sum(per_device[op][0] for op in FFN) // L
    reduce = [c for c in collectives(query, {"B": B, "S": S}) if c.where == "ffn down_proj"][0]
    for rank in range(TP):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["close"]
        assert got["flops"] == expected
        assert got["all_reduce_bytes"] == reduce.bytes and reduce.count == L
