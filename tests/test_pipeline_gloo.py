"""Two pipeline stages of the verify decoder on two gloo ranks (torch.distributed on CPU), the activation
handed over with plain send/recv: per rank the FLOPs it executes (verify's Counter: FlopCounterMode with
attention's legal pairs) and the bytes it sends, held to costcalc's per-stage ``stage_flops`` and its
``send_recv`` collective, for a prefill and then a decode step over that cache. A 3-layer toy splits
unevenly as vLLM splits it (2 layers, then 1 with the LM head).

Fast: both ranks in this process (two ``ProcessGroupGloo`` over one store; threads only to meet), the
stages run one after the other. Slow (``-m slow``): the same on two spawned processes."""
import json
import os
import threading
from datetime import timedelta

import pytest

from costcalc import parallel, presets, spec as specs
from costcalc.evaluate import Options, Query
from costcalc.stages import partition

from ranks import spawn

PP, B, S, LAYERS = 2, 2, 5, 3
DEADLINE_S = 90


def _model_spec():
    return specs.from_dict({**presets.load("toy").to_dict(), "L": LAYERS}, origin="test: the toy with 3 layers")


def _stage_class():
    import torch
    from torch import nn

    from costcalc.verify.model import causal_mask

    class Stage(nn.Module):
        """One rank's part of the decoder, holding the decoder's modules under its own names (``layers.i``,
        ``lm_head``) so the counter charges each to its operator: the first stage embeds and sends
        (``send(tensor)``), the last receives (``recv(tensor)``) and runs the LM head on each sequence's
        last position."""

        def __init__(self, model, rank, send=None, recv=None):
            super().__init__()
            first = partition(LAYERS, PP)[0]
            self.c, self.rank, self.send, self.recv = model.c, rank, send, recv
            self.own = list(range(first) if rank == 0 else range(first, LAYERS))
            self.embed, self.layers, self.norm, self.lm_head = model.embed, model.layers, model.norm, model.lm_head

        def forward(self, tokens, past, cache):
            batch, new = tokens.shape
            positions, mask = torch.arange(past, past + new), causal_mask(new, past)
            if self.rank == 0:
                x = self.embed(tokens)
            else:
                wire = torch.empty(batch, new, self.c.d, dtype=torch.bfloat16)
                self.recv(wire)
                x = wire.float()
            for i in self.own:
                x = self.layers[i](x, positions, mask, cache[i])
            if self.rank == 0:
                wire = x.to(torch.bfloat16)       # activations between stages in bf16 (parallel.ACT_BITS)
                self.send(wire)
                return None, wire.numel() * wire.element_size()
            return self.lm_head(self.norm(x)[:, -1]), 0

    return Stage


def _inputs(spec):
    import torch

    torch.manual_seed(1)
    return torch.randint(0, spec["V"], (B, S)), torch.randint(0, spec["V"], (B, 1))


def _run(part, model, prompt, token):
    """One rank's prefill and then decode step over its own cache, each counted (the stage is the
    counted root): ({phase: FLOPs, phase_sent: bytes}, the last stage's logits of the step)."""
    import torch

    from costcalc.verify.counting import Counter

    cache, out = model.new_cache(B, S + 1), {}
    for phase, tokens, past in (("prefill", prompt, 0), ("decode", token, S)):
        with torch.no_grad(), Counter(part) as counter:
            logits, sent = part(tokens, past, cache)
        out[phase], out[f"{phase}_sent"] = counter.result().term("total", "causal"), sent
    return out, logits


def _close(model, prompt, token, logits) -> bool:
    """The pipeline gives the whole model's logits (bf16 hand-over: close, not equal)."""
    import torch

    from costcalc.verify.model import causal_mask

    with torch.no_grad():
        whole = model(torch.cat([prompt, token], 1), causal_mask(S + 1))
    return bool(torch.allclose(logits, whole, atol=2e-2, rtol=2e-2))


def _check(got):
    spec = _model_spec()
    assert got[1]["close"]
    for workload, point, phase in [("prefill", {"B": [B], "S": [S]}, "prefill"),
                                   ("decode", {"B": [B], "T": [S]}, "decode")]:
        row = parallel.pipeline_columns(Query(spec, workload, Options(pp=PP)), point, 1)
        assert row["stage_layers"][0] == [2, 1]
        assert [g[phase] for g in got] == row["stage_flops"][0]
        sends = [c for c in row["collectives"][0] if c["op"] == "send_recv"]
        assert [(c["stage"], c["count"], c["bytes"]) for c in sends] == [(0, 1, got[0][f"{phase}_sent"])]


def test_two_gloo_ranks_in_one_process_run_what_costcalc_charges_each_stage():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from costcalc.verify.build import from_spec

    store, groups = dist.HashStore(), [None] * PP

    def meet(rank):
        groups[rank] = dist.ProcessGroupGloo(store, rank, PP, timedelta(seconds=20))

    threads = [threading.Thread(target=meet, args=(r,), daemon=True) for r in range(PP)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(groups), "the two gloo ranks did not meet"
    spec = _model_spec()
    model = from_spec(spec, seed=0)
    prompt, token = _inputs(spec)
    Stage = _stage_class()
    pending = []     # rank 0's sends complete once rank 1 has received them
    first = Stage(model, 0, send=lambda x: pending.append(groups[0].send([x], 1, 0)))
    last = Stage(model, 1, recv=lambda x: groups[1].recv([x], 0, 0).wait(timedelta(seconds=20)))
    got = [_run(first, model, prompt, token)[0]]
    out, logits = _run(last, model, prompt, token)
    got.append(out)
    for work in pending:
        work.wait(timedelta(seconds=20))
    got[1]["close"] = _close(model, prompt, token, logits)
    _check(got)


def _rank(rank: int, folder: str, port: int) -> None:
    import torch.distributed as dist

    from costcalc.verify.build import from_spec

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=PP,
                            timeout=timedelta(seconds=20))
    spec = _model_spec()
    model = from_spec(spec, seed=0)          # the same weights on both ranks; each runs its own layers
    prompt, token = _inputs(spec)
    part = _stage_class()(model, rank, send=lambda x: dist.send(x, dst=1), recv=lambda x: dist.recv(x, src=0))
    out, logits = _run(part, model, prompt, token)
    if rank == 1:
        out["close"] = _close(model, prompt, token, logits)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()     # on success only: a failing rank exits at once, its traceback to join


@pytest.mark.slow
def test_two_gloo_processes_run_what_costcalc_charges_each_stage(tmp_path):
    pytest.importorskip("torch")
    spawn(_rank, tmp_path, PP, DEADLINE_S)
    _check([json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(PP)])
