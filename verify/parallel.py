"""verify's parallel mode: the verify decoder run sharded across processes with torch.distributed,
each rank's executed FLOPs and collectives held to costcalc's per-device numbers (docs/cost-model.md,
"Verifying the parallel model").

The ranks (``launch``: spawned processes, gloo on CPU, nccl on GPUs, the same code) each build the
whole decoder from the same seed and keep their shard as plain local tensors (never DTensor: a
FlopCounterMode over DTensor counts the global FLOPs):

- tensor parallel (Megatron): q, k, v, gate, up and the LM head split by output rows (columns of
  the product), o and down by input columns (rows), so each rank runs ``h_q / tp`` query heads and
  its ``m / tp`` of every FFN; where ``h_kv < tp`` each rank keeps the one KV head its query heads
  read (vLLM's ``QKVParallelLinear`` replicates it on ``tp / h_kv`` ranks). The partial outputs of
  o_proj and down_proj are summed with ``dist.all_reduce``; the vocabulary-parallel logits are
  gathered with ``all_gather_into_tensor`` (then cut back to V). The embedding is vocabulary-parallel:
  the vocabulary padded to a multiple of 64 with zero rows as vLLM pads it (``layout.vocab``), rank r
  holds rows r P .. (r+1) P - 1 of the P = padded / tp a rank, looks up the tokens there, zeros elsewhere,
  and its partial lookups are summed with one all-reduce (vLLM's ``VocabParallelEmbedding``); the norms
  are whole on every rank.
- sequence parallel (``sp``, Korthikanti et al. 2022): each all-reduce is a ``reduce_scatter_tensor``
  (each rank keeps B n / tp tokens for the residual add and the norm) and an
  ``all_gather_into_tensor`` of the normed tokens before the next column-split projections (the
  next FFN's, the next layer's or the LM head's).
- expert parallel (``ep`` = ``tp``): rank r holds experts r E/ep .. (r+1) E/ep - 1 whole; the router
  runs whole on every rank (replicated); rank r dispatches the k copies of its share of the tokens
  (ceil(B n / ep)) to the experts' ranks with ``all_to_all_single`` and gets their outputs back
  with a second one (combine); the routed outputs and the shared experts' partial outputs are then
  summed by the FFN's all-reduce. The routing is fixed and balanced (``model.balanced_route``: the
  (token, choice) pairs cycle over the ranks' expert groups), so costcalc's expected n k / ep pairs a
  rank are exact where ep divides B n; the split sizes follow from it on every rank, so no count
  exchange runs.

Messages travel in costcalc's activation dtype (``costcalc.parallel.ACT_BITS``: bf16), whatever the
compute dtype. Per rank a ``verify.counting.Counter`` counts the FLOPs of every operator and a
``CommRecorder`` (a TorchDispatchMode over the c10d ops) records every collective (op, where,
message bytes); both are compared exactly with ``costcalc.parallel.operator_columns`` (sharded) and
``costcalc.parallel.collectives``: the verifier holds no formula of its own.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections import Counter as Tally
from datetime import timedelta
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.layout import Layout, device_spec
from costcalc.parallel import ACT_BITS, collectives, operator_columns
from costcalc.spec import ModelSpec

from . import build
from .counting import Counter
from .model import Decoder, DecoderConfig, MoEFeedForward, causal_mask

ACT_DTYPE = {16: torch.bfloat16, 32: torch.float32}[ACT_BITS]
WORKLOADS = ("prefill", "decode")
# The gathered logits against the whole decoder's (same weights, one process), relative to the largest
# logit: the messages are rounded to bf16 (a few per cent of the small logits of random weights); a
# wrong shard or a missing sum is off by the whole size of its part.
LOGITS_GAP = 0.1
TIMEOUT_S = 300          # a whole run (the CLI's --timeout default)
COLLECTIVE_S = 60        # gloo's and nccl's own timeout for one collective


# ---------------------------------------------------------------------------------------------
# Recording the collectives a rank runs

def _message(name: str, args: tuple) -> tuple[str, int]:
    """(costcalc's op, message bytes) of one c10d op: the buffer an all-reduce reduces, the gathered
    output of an all-gather, the input of a reduce-scatter, the send buffer of an all-to-all."""
    def size(t) -> int:
        return t.numel() * t.element_size()

    if name in ("c10d.allreduce_", "_c10d_functional.all_reduce", "_c10d_functional.all_reduce_"):
        tensors = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        return "all_reduce", sum(size(t) for t in tensors)
    if name == "c10d._allgather_base_":
        return "all_gather", size(args[0])
    if name == "_c10d_functional.all_gather_into_tensor":
        return "all_gather", size(args[0]) * int(args[1])
    if name == "c10d._reduce_scatter_base_":
        return "reduce_scatter", size(args[1])
    if name == "_c10d_functional.reduce_scatter_tensor":
        return "reduce_scatter", size(args[0])
    if name == "c10d.alltoall_base_":
        return "all_to_all", size(args[1])
    if name == "_c10d_functional.all_to_all_single":
        return "all_to_all", size(args[0])
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return name, sum(size(t) for t in tensors)      # anything else: by its own name (no formula has it)


class CommRecorder(TorchDispatchMode):
    """Records every c10d collective run inside it: (op, where, message bytes), ``where`` the label
    of the innermost ``at(where)`` (empty outside any). The in-place ``c10d`` ops and the functional
    ``_c10d_functional`` ones (what DTensor and Hugging Face's tensor parallel run) alike; waits
    (``wait_tensor``) and the functional ops' autograd wrapper (``_wrap_tensor_autograd``) move no
    data and are not recorded."""

    NAMESPACES = ("c10d", "_c10d_functional")
    SKIP = ("wait_tensor", "barrier", "monitored_barrier_", "_wrap_tensor_autograd")

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []
        self.where = ""

    @contextlib.contextmanager
    def at(self, where: str):
        outer, self.where = self.where, where
        try:
            yield
        finally:
            self.where = outer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace in self.NAMESPACES:
            name = f"{func.namespace}.{func._opname}"
            if func._opname not in self.SKIP:
                op, size = _message(name, args)
                self.calls.append((op, self.where, size))
        return out

    def table(self) -> list[dict[str, Any]]:
        """The calls as costcalc's ``Collective`` rows: (op, where, bytes) counted."""
        tally = Tally(self.calls)
        return [{"op": op, "where": where, "count": n, "bytes": size} for (op, where, size), n in tally.items()]


# ---------------------------------------------------------------------------------------------
# The sharded decoder

SUPPORTED = ("gqa", "window", "chunk")


def check(spec: ModelSpec, layout: Layout) -> None:
    """What this verifier shards (besides costcalc's own ``layout.check``): GQA-family attention
    without gates or other value widths, dense, MLP and MoE FFNs, ep = tp, no pp, dp."""
    if layout.pp > 1 or layout.dp > 1:
        raise CostcalcError(f"verify {layout.flags}: the sharded verifier runs tensor, expert and sequence "
                            f"parallel layouts (--tp, --ep, --sp); --pp and --dp are not run yet")
    if layout.ep not in (1, layout.tp):
        raise CostcalcError(f"verify --ep {layout.ep}: the sharded verifier places experts over the "
                            f"tensor-parallel ranks (--ep {layout.tp})")
    for group in spec.groups:
        block = group.block
        if (block.attention not in SUPPORTED or block.gated or block.head_gate or block.dv or block.k_eq_v
                or block.mixer or block.sparse or block.ffn not in ("dense", "mlp", "moe", "none")):
            raise CostcalcError(f"verify {layout.flags}: {spec.name}'s {block.key} layers are not sharded by the "
                                f"verifier yet (GQA, sliding-window or chunked attention without gates, with dense, "
                                f"MLP or MoE FFNs)")


def balance(model: nn.Module, layout: Layout) -> None:
    """Every MoE layer of ``model`` routed by ``balanced_route`` over the ep ranks' expert groups."""
    for module in model.modules():
        if isinstance(module, MoEFeedForward):
            module.balanced = layout.ep


def _rows(weight: torch.Tensor, part: int, index: int) -> torch.Tensor:
    return weight[index * part:(index + 1) * part]


def _vocab_rows(weight: torch.Tensor, part: int, index: int) -> torch.Tensor:
    """Rank ``index``'s ``part`` rows of a vocabulary table padded with zero rows to ``part`` x tp (vLLM's
    ``pad_vocab_size``: the padded rows hold no token and their logits are cut off)."""
    rows = weight[index * part:(index + 1) * part]
    return torch.cat([rows, rows.new_zeros(part - rows.shape[0], *rows.shape[1:])]) if rows.shape[0] < part else rows


def _cols(weight: torch.Tensor, part: int, index: int) -> torch.Tensor:
    return weight[:, index * part:(index + 1) * part]


class ShardedDecoder(Decoder):
    """One rank's decoder: the modules at one device's sizes (``layout.device_spec``) holding that
    rank's slices of ``full``'s weights, and a forward that runs the collectives between them."""

    def __init__(self, spec: ModelSpec, full: Decoder, layout: Layout, rank: int) -> None:
        local = DecoderConfig.from_spec(device_spec(spec, layout))
        with torch.device("meta"):                         # every weight is copied in below
            super().__init__(local)
            self.to(dtype=full.lm_head.weight.dtype)
        self.to_empty(device=full.lm_head.weight.device)
        self.layout, self.rank, self.recorder, self.vocab = layout, rank, None, spec["V"]
        r = rank
        with torch.no_grad():
            self.embed.weight.copy_(_vocab_rows(full.embed.weight, self.c.V, r))   # padded V / tp rows
            if full.position is not None:
                self.position.weight.copy_(full.position.weight)
            if self.norm.weight is not None:
                self.norm.weight.copy_(full.norm.weight)
            self.lm_head.weight.copy_(_vocab_rows(full.lm_head.weight, self.c.V, r))
            for mine, whole, lc, wc in zip(self.layers, full.layers, self.c.layers, full.c.layers):
                for name in ("attn_norm", "ffn_norm"):
                    norm = getattr(mine, name)
                    if norm is not None and norm.weight is not None:
                        norm.weight.copy_(getattr(whole, name).weight)
                if mine.attn is not None:
                    self._attention(mine.attn, whole.attn, lc, wc)
                if isinstance(mine.ffn, MoEFeedForward):
                    self._moe(mine.ffn, whole.ffn, lc)
                elif mine.ffn is not None:
                    self._ffn(mine.ffn, whole.ffn, lc.m)
        balance(self, layout)

    def _attention(self, mine, whole, lc, wc) -> None:
        r, d_h = self.rank, lc.d_h
        mine.q_proj.weight.copy_(_rows(whole.q_proj.weight, lc.h_q * d_h, r))
        # KV heads: h_kv / tp a rank, or (h_kv < tp) the one head this rank's query heads read
        kv = r if wc.h_kv >= self.layout.tp else (r * lc.h_q) // (wc.h_q // wc.h_kv)
        mine.k_proj.weight.copy_(_rows(whole.k_proj.weight, lc.h_kv * d_h, kv))
        mine.v_proj.weight.copy_(_rows(whole.v_proj.weight, lc.h_kv * d_h, kv))
        mine.o_proj.weight.copy_(_cols(whole.o_proj.weight, lc.h_q * d_h, r))

    def _ffn(self, mine, whole, width: int) -> None:
        for name in ("gate_proj", "up_proj"):
            if hasattr(mine, name):
                getattr(mine, name).weight.copy_(_rows(getattr(whole, name).weight, width, self.rank))
        mine.down_proj.weight.copy_(_cols(whole.down_proj.weight, width, self.rank))

    def _moe(self, mine: MoEFeedForward, whole: MoEFeedForward, lc) -> None:
        mine.router.weight.copy_(whole.router.weight)
        if mine.shared_expert_gate is not None:
            mine.shared_expert_gate.weight.copy_(whole.shared_expert_gate.weight)
        for a, b in zip(mine.shared_experts, whole.shared_experts):
            self._ffn(a, b, lc.m_s)
        ep = self.layout.ep
        for e, (a, b) in enumerate(zip(mine.experts, whole.experts)):
            if ep == 1:                                    # every expert, split by width
                self._ffn(a, b, lc.m_e)
            elif e in self.own_experts(lc.E):              # whole experts, this rank's share
                a.load_state_dict(b.state_dict())
            else:
                mine.experts[e] = nn.Identity()            # another rank's: not held here

    def own_experts(self, E: int) -> range:
        per = E // self.layout.ep
        return range(self.rank * per, (self.rank + 1) * per)

    # -- collectives ---------------------------------------------------------------------------

    def _label(self, where: str):
        return self.recorder.at(where) if self.recorder is not None else contextlib.nullcontext()

    def _all_reduce(self, y: torch.Tensor, where: str) -> torch.Tensor:
        msg = y.to(ACT_DTYPE)
        with self._label(where):
            dist.all_reduce(msg)
        return msg.to(y.dtype)

    def _reduce_scatter(self, y_TD: torch.Tensor, where: str) -> torch.Tensor:
        msg = y_TD.to(ACT_DTYPE).contiguous()
        out = msg.new_empty(msg.shape[0] // self.layout.tp, msg.shape[1])
        with self._label(where):
            getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, msg)
        return out.to(y_TD.dtype)

    def _all_gather(self, x_TD: torch.Tensor, where: str) -> torch.Tensor:
        msg = x_TD.to(ACT_DTYPE).contiguous()
        out = msg.new_empty(msg.shape[0] * self.layout.tp, *msg.shape[1:])
        with self._label(where):
            getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, msg)
        return out.to(x_TD.dtype)

    # -- forward -------------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, mask, past: int = 0, cache=None, logits: str = "last",
                rows=None, form: str = "naive", scan: str = "chunked") -> Optional[torch.Tensor]:
        B, C = tokens.shape
        tp, sp, d = self.layout.tp, self.layout.sp, self.c.d
        positions = torch.arange(past, past + C, device=tokens.device)
        own = slice(self.rank * (B * C // tp), (self.rank + 1) * (B * C // tp))
        lo, rows_here = self.rank * self.c.V, self.c.V     # this rank's rows of the embedding
        inside = (tokens >= lo) & (tokens < lo + rows_here)
        x = F.embedding((tokens - lo).clamp(0, rows_here - 1), self.embed.weight) * inside[..., None]
        x_TD = x.reshape(B * C, d)                         # the residual: every token, or (sp) this rank's
        if sp:                                             # the partial lookups summed (vLLM's VocabParallelEmbedding)
            x_TD, pending, sharded = self._reduce_scatter(x_TD, "embedding"), "embedding", True
        else:
            x_TD, pending, sharded = self._all_reduce(x_TD, "embedding"), None, False
        if self.position is not None:
            where = self.position(positions)[None].expand(B, C, d).reshape(B * C, d)
            x_TD = x_TD + (where[own] if sharded else where)

        def enter(norm) -> torch.Tensor:                   # the normed input of a column-split projection
            if sp and sharded:
                return self._all_gather(norm(x_TD), pending).view(B, C, d)
            return norm(x_TD).view(B, C, d)

        def leave(y: torch.Tensor, where: str) -> torch.Tensor:   # the row-split projection's partial sums
            nonlocal pending, sharded
            y_TD = y.reshape(B * C, d)
            if not sp:
                return x_TD + self._all_reduce(y_TD, where)
            pending, base = where, (x_TD if sharded else x_TD[own])
            sharded = True
            return base + self._reduce_scatter(y_TD, where)

        for i, layer in enumerate(self.layers):
            if layer.attn is not None:
                h = enter(layer.attn_norm)
                x_TD = leave(layer.attn(h, positions, mask, cache[i].kv if cache is not None else None, form),
                             "o_proj")
            if layer.ffn is not None:
                h = enter(layer.ffn_norm)
                y = self._moe_forward(layer.ffn, h) if isinstance(layer.ffn, MoEFeedForward) else layer.ffn(h)
                x_TD = leave(y, "ffn down_proj")
        if logits == "none":
            return None
        x = enter(self.norm)
        if logits == "all":
            part = self.lm_head(x)                                          # [B, C, V / tp]
        else:
            if rows is None:
                rows = (torch.arange(B, device=x.device), torch.full((B,), C - 1, device=x.device))
            part = self.lm_head(x[rows][None])[0]                           # [R, V / tp]
        return self._gather_logits(part)

    def _gather_logits(self, part: torch.Tensor) -> torch.Tensor:
        """The vocabulary-parallel logits gathered: [.., padded V / tp] on each rank -> [.., padded V],
        then the padded rows' cut off -> [.., V] (vLLM's ``LogitsProcessor``)."""
        lead, width = part.shape[:-1], part.shape[-1]
        flat = part.reshape(-1, width)
        got = self._all_gather(flat.T.contiguous(), "lm_head")            # [V, R]: ranks' rows stacked
        return got.T.reshape(*lead, width * self.layout.tp)[..., :self.vocab]

    def _moe_forward(self, moe: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
        """The MoE FFN's partial output on this rank (summed over ranks by the FFN's all-reduce)."""
        B, S, d = x.shape
        x_TD = x.reshape(B * S, d)
        weights_TK, experts_TK = moe.route(x_TD)            # the router: whole, on every token
        if self.layout.ep == 1:
            out_TD = torch.zeros_like(x_TD)
            for e, expert in enumerate(moe.experts):
                token, slot = (experts_TK == e).nonzero(as_tuple=True)
                if token.numel():
                    out_TD.index_put_((token,), expert(x_TD[token]) * weights_TK[token, slot, None], accumulate=True)
        else:
            out_TD = self._expert_parallel(moe, x_TD, weights_TK, experts_TK)
        return moe.with_shared(out_TD.view(B, S, d), x)

    def _expert_parallel(self, moe: MoEFeedForward, x_TD, weights_TK, experts_TK) -> torch.Tensor:
        """Dispatch this rank's tokens' k copies to the experts' ranks, run the own experts on what
        arrives, combine: the routed outputs of this rank's tokens (zero elsewhere)."""
        T, ep, E, k = x_TD.shape[0], self.layout.ep, len(moe.experts), moe.k
        per, share = E // ep, -(-T // ep)

        def pairs(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
            """A rank's (token, slot) pairs in its send order: by destination rank, then token, slot."""
            tokens = torch.arange(rank * share, min(T, (rank + 1) * share), device=x_TD.device)
            token = tokens[:, None].expand(-1, k).reshape(-1)
            slot = torch.arange(k, device=x_TD.device).repeat(len(tokens))
            dest = experts_TK[token, slot] // per
            order = torch.argsort(dest * T * k + token * k + slot)
            return token[order], slot[order]

        token, slot = pairs(self.rank)
        send_counts = torch.bincount(experts_TK[token, slot] // per, minlength=ep).tolist()
        arriving = [pairs(src) for src in range(ep)]
        mine = [experts_TK[t, s] // per == self.rank for t, s in arriving]
        recv_counts = [int(m.sum()) for m in mine]
        recv_experts = torch.cat([experts_TK[t, s][m] for (t, s), m in zip(arriving, mine)])
        send = x_TD[token].to(ACT_DTYPE)
        got = send.new_empty(sum(recv_counts), x_TD.shape[1])
        with self._label("experts dispatch"):
            dist.all_to_all_single(got, send, recv_counts, send_counts)
        got = got.to(x_TD.dtype)
        done = torch.zeros_like(got)
        for e in self.own_experts(E):
            at = (recv_experts == e).nonzero(as_tuple=True)[0]
            if at.numel():
                done[at] = moe.experts[e](got[at])
        back = send.new_empty(len(token), x_TD.shape[1])
        with self._label("experts combine"):
            dist.all_to_all_single(back, done.to(ACT_DTYPE), send_counts, recv_counts)
        out_TD = torch.zeros_like(x_TD)
        out_TD.index_put_((token,), back.to(x_TD.dtype) * weights_TK[token, slot, None], accumulate=True)
        return out_TD


# ---------------------------------------------------------------------------------------------
# One rank's run and the comparison with costcalc

def points(workload: str, seq: int, batch: int) -> dict[str, int]:
    """costcalc's point of a verify job: prefill of S tokens a sequence, or one decode step after T = S."""
    return {"B": batch, "S": seq} if workload == "prefill" else {"B": batch, "T": seq}


def run_rank(rank: int, spec: ModelSpec, layout: Layout, workloads: Sequence[str], seqs: Sequence[int],
             batch: int, dtype: str, device: str, seed: int = 0) -> dict:
    """Inside a rank (the process group is up): build, shard, run each job under the counters.
    Returns per job the counted operators, attention per convention, collectives, and how far the
    gathered logits are from the whole decoder's."""
    dev = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
    torch_dtype = build.DTYPES[dtype]
    full = build.from_spec(spec, dtype=torch_dtype, device=dev, seed=seed)
    balance(full, layout)
    model = ShardedDecoder(spec, full, layout, rank).eval()
    out = []
    with torch.no_grad():
        for workload in workloads:
            for seq in seqs:
                out.append(_job(model, full, workload, seq, batch, dev))
    return {"rank": rank, "jobs": out}


def _job(model: ShardedDecoder, full: Decoder, workload: str, seq: int, batch: int, dev) -> dict:
    gen = torch.Generator().manual_seed(1000 + seq)
    if workload == "prefill":
        tokens = torch.randint(0, full.c.V, (batch, seq), generator=gen).to(dev)
        mask, past, caches = causal_mask(seq, device=dev), 0, (None, None)
    else:
        prefix = torch.randint(0, full.c.V, (batch, seq), generator=gen).to(dev)
        tokens = torch.randint(0, full.c.V, (batch, 1), generator=gen).to(dev)
        caches = (model.new_cache(batch, seq + 1), full.new_cache(batch, seq + 1))
        model(prefix, causal_mask(seq, device=dev), 0, caches[0], logits="none")     # setup: not counted
        full(prefix, causal_mask(seq, device=dev), 0, caches[1], logits="none")
        mask, past = causal_mask(1, seq, device=dev), seq
    recorder = CommRecorder()
    model.recorder = recorder
    with Counter(model, (16, 16)) as counter, recorder:
        logits = model(tokens, mask, past, caches[0])
    model.recorder = None
    counted = counter.result()
    whole = full(tokens, mask, past, caches[1])
    gap = (logits.double() - whole.double()).abs().max().item()
    scale = whole.double().abs().max().item()
    return {"workload": workload, "seq": seq, "batch": batch, "operators": counted.operators,
            "attention": counted.attention, "collectives": recorder.table(), "gap": gap, "scale": scale}


def compare(spec: ModelSpec, layout: Layout, results: Sequence[dict], convention: str = "causal") -> list[dict]:
    """Check rows: each rank's counted FLOPs per operator and collectives against costcalc's
    per-device numbers for the same point (``operator_columns`` sharded, ``collectives``)."""
    rows = []
    for result in results:
        for job in result["jobs"]:
            query = Query(spec, job["workload"], Options(convention=convention, tp=layout.tp, ep=layout.ep,
                                                         sp=layout.sp))
            point = points(job["workload"], job["seq"], job["batch"])
            expected = operator_columns(query, {k: [v] for k, v in point.items()}, 1, sharded=True)
            counted = dict(job["operators"], attention=job["attention"][convention])
            label = (f"{job['workload']} B={job['batch']} " + (f"S={job['seq']}" if job["workload"] == "prefill"
                                                                 else f"T={job['seq']}"))
            base = {"rank": result["rank"], "job": label}
            for op in sorted(set(expected) | {k for k, v in counted.items() if v}):
                want = expected.get(op, [0])[0]
                got = counted.get(op, 0)
                rows.append({**base, "check": f"flops {op}", "counted": got, "costcalc": _plain(want),
                             "match": got == want, "layout": layout.label})
            want_comm = {(c.op, c.where, c.bytes): c.count for c in collectives(query, point)}
            got_comm = {(c["op"], c["where"], c["bytes"]): c["count"] for c in job["collectives"]}
            for key in sorted(set(want_comm) | set(got_comm)):
                op, where, size = key
                rows.append({**base, "check": f"{op} {where} x {size} B", "counted": got_comm.get(key, 0),
                             "costcalc": want_comm.get(key, 0), "match": got_comm.get(key) == want_comm.get(key),
                             "layout": layout.label})
            gap = job["gap"] / max(job["scale"], 1e-30)
            rows.append({**base, "check": "logits: max |diff| / max |logit|", "counted": round(gap, 6),
                         "costcalc": f"<= {LOGITS_GAP}", "match": gap <= LOGITS_GAP, "layout": layout.label})
    return rows


def _plain(value: Any) -> Any:
    return int(value) if float(value).is_integer() else float(value)


# ---------------------------------------------------------------------------------------------
# Spawning the ranks

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, folder: str, backend: str, target: str, kwargs: dict,
               launcher: int) -> None:
    """A spawned rank: the process group up, ``target`` run, its result (or its error) in a file. An
    error is written before the process group is torn down, so the rank that failed first says so
    first (the others then fail on the closed connection). A rank outlives no ``launcher``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # Ctrl-C is the parent's: it terminates the ranks
    threading.Thread(target=_watch, args=(launcher,), daemon=True).start()
    torch.set_num_threads(int(os.environ.get("COSTCALC_RANK_THREADS", "1")))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=COLLECTIVE_S))
        try:
            module, name = target.rsplit(":", 1)
            fn = getattr(__import__(module, fromlist=[name]), name)
            result = fn(rank, **kwargs)
        except BaseException as exc:                  # noqa: BLE001 -- every failure reaches the parent
            _report(folder, rank, exc)
            raise SystemExit(1)
        finally:
            dist.destroy_process_group()
        _write(os.path.join(folder, f"rank{rank}.json"), json.dumps(result))
    except SystemExit:
        raise
    except BaseException as exc:                      # noqa: BLE001 -- the process group did not come up
        _report(folder, rank, exc)
        raise SystemExit(1)


def _watch(launcher: int) -> None:
    """End this rank when the process that launched it is gone (killed outright: its cleanup never ran)."""
    while True:
        time.sleep(1)
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


def _report(folder: str, rank: int, exc: BaseException) -> None:
    """A rank's error for the parent: when (a clock all processes share), the message, the traceback."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not isinstance(exc, CostcalcError):
        message = f"{type(exc).__name__}: {message}"
    _write(os.path.join(folder, f"rank{rank}.error"), f"{time.monotonic_ns()}\n{message}\n{traceback.format_exc()}")


def _write(path: str, text: str) -> None:
    """Whole or not at all: the parent may read it as soon as it is there."""
    with open(path + ".part", "w") as f:
        f.write(text)
    os.replace(path + ".part", path)


def launch(world: int, target: str, kwargs: dict, backend: str = "gloo", timeout: float = TIMEOUT_S) -> list:
    """Run ``target`` (``module:function``, called as ``function(rank, **kwargs)``) in ``world``
    spawned processes joined by a process group; their results, by rank. The ranks are ended on
    every way out (a result, a failing rank, the timeout, Ctrl-C); a failing rank is an error
    with its message, the first to fail named."""
    import multiprocessing as mp

    # forkserver: one server process imports torch and this module once, each rank is forked from it
    # (single-threaded, torch's thread pools not yet started); spawn would import them once a rank.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    with tempfile.TemporaryDirectory(prefix="costcalc-ranks-") as folder:
        port = free_port()
        procs = [ctx.Process(target=_rank_main, args=(r, world, port, folder, backend, target, kwargs, os.getpid()),
                             daemon=True, name=f"costcalc-rank{r}") for r in range(world)]
        try:
            for p in procs:
                p.start()
            deadline = time.monotonic() + timeout
            while True:
                codes = [p.exitcode for p in procs]
                if any(c not in (None, 0) for c in codes):
                    raise CostcalcError(_failure(folder, codes))
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    raise CostcalcError(f"the {world} ranks did not finish in {timeout:g} s (ended)")
                procs[codes.index(None)].join(0.05)
            results = []
            for r in range(world):
                with open(os.path.join(folder, f"rank{r}.json")) as f:
                    results.append(json.load(f))
            return results
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                if p.pid is not None:
                    p.join(5)
                    if p.is_alive():
                        p.kill()
                        p.join()


def _failure(folder: str, codes: list) -> str:
    """The message of the rank that failed first (the others then fail on a closed connection), else
    the exit codes."""
    found = []
    for r in range(len(codes)):
        path = os.path.join(folder, f"rank{r}.error")
        if os.path.exists(path):
            with open(path) as f:
                when, message = f.readline(), f.readline()
            found.append((int(when), r, message.strip()))
    if found:
        _, r, message = min(found)
        return f"rank {r}: {message}"
    failed = ", ".join(f"rank {r} exit code {c}" for r, c in enumerate(codes) if c not in (None, 0))
    return f"a rank ended without a result ({failed})"


def verify(spec: ModelSpec, layout: Layout, workloads: Sequence[str] = WORKLOADS, seqs: Sequence[int] = (8,),
           batch: int = 1, dtype: str = "float32", device: str = "cpu", timeout: float = TIMEOUT_S,
           convention: str = "causal") -> list[dict]:
    """The parallel verification: checked, launched, compared. Returns the check rows."""
    for name in workloads:
        if name not in WORKLOADS:
            raise CostcalcError(f"verify {layout.flags}: workload {name!r}: the sharded verifier runs "
                                f"{' and '.join(WORKLOADS)}")
    if layout.single:
        raise CostcalcError("verify's parallel mode needs a layout: --tp 2 or more")
    check(spec, layout)
    for name in workloads:                              # costcalc's own checks: divisibility, what is modelled
        query = Query(spec, name, Options(tp=layout.tp, ep=layout.ep, sp=layout.sp))
        for seq in seqs:
            collectives(query, points(name, seq, batch))
            tokens = batch * (seq if name == "prefill" else 1)
            if layout.ep > 1 and tokens % layout.ep:
                plural = "s" * (tokens != 1)
                raise CostcalcError(f"verify --ep {layout.ep}: a {name} forward of {tokens} token{plural} does not "
                                    f"divide by {layout.ep}; costcalc's all-to-all is the busiest rank's, which "
                                    f"only every rank sends where the tokens divide (use --batch {layout.ep})")
    if dtype not in build.DTYPES:
        raise CostcalcError(f"unknown dtype {dtype!r}; expected one of {', '.join(build.DTYPES)}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= layout.devices else "cpu"
    if device == "cuda" and torch.cuda.device_count() < layout.devices:
        raise CostcalcError(f"verify {layout.flags} --device cuda: {layout.devices} GPUs needed, "
                            f"{torch.cuda.device_count()} visible")
    if device not in ("cpu", "cuda"):
        raise CostcalcError(f"unknown device {device!r}; expected auto, cpu or cuda")
    backend = "nccl" if device == "cuda" else "gloo"
    kwargs = dict(spec=spec, layout=layout, workloads=list(workloads), seqs=list(seqs), batch=batch, dtype=dtype,
                  device=device)
    results = launch(layout.devices, "costcalc.verify.parallel:run_rank", kwargs, backend, timeout)
    return compare(spec, layout, results, convention)
