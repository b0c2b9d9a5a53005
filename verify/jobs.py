"""Each workload of the cost model as a job the decoder executes, with the core's expected numbers.

``JOBS`` has one job body per workload of the core's registry (``costcalc.core.registry``) that
a decoder runs as such, under the same name (``decode_phase`` runs inside ``generate``;
``train`` is three forwards, not verified). A ``Job`` has a ``setup`` (uncounted, untimed: filling a KV cache with
the prefix, say), a ``run`` (what is counted and timed), ``expected(convention, precision,
machine)``: the row the calculator gives for the same sizes (with bytes and time when asked),
and ``operators()``: the core's FLOPs of each linear operator -- read from ``costcalc.calc``,
never re-typed here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from costcalc import calc
from costcalc.spec import ModelSpec
from .model import Decoder, Packed, causal_mask


@dataclass
class Job:
    """``passes``: every forward the job makes (its setup's too) as (batch, queries, keys);
    ``positions``: the position table rows it reads (its longest position + 1); ``cache``:
    the tokens its KV cache holds (0: none). What the job needs is known before any work."""
    workload: str
    detail: str
    setup: Callable[[Decoder], Any]
    run: Callable[[Decoder, Any], Any]
    expected: Callable[..., dict]                          # (convention, precision=None, machine=None)
    operators: Callable[[], dict] = dict                   # linear operator -> FLOPs (any convention)
    passes: tuple[tuple[int, int, int], ...] = ()
    positions: int = 0
    cache: int = 0
    batch: int = 1


def _tokens(batch: int, n: int, vocab: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, n), generator=gen).to(device)


def _later(batch: int, n: int, vocab: int, seed: int, device) -> Callable[[], torch.Tensor]:
    """``_tokens`` made on first use (a job is built before the memory check; its inputs are not)."""
    made: list[torch.Tensor] = []

    def get() -> torch.Tensor:
        if not made:
            made.append(_tokens(batch, n, vocab, seed, device))
        return made[0]

    return get


def _fill(model: Decoder, batch: int, prefix: int, capacity: int, device, window_cache: str = "whole"):
    """A cache of ``capacity`` holding ``prefix`` tokens (uncounted setup)."""
    cache = model.new_cache(batch, capacity, window_cache)
    if prefix:
        model(_tokens(batch, prefix, model.c.V, 1, device), causal_mask(prefix, device=device),
              0, cache, logits="none")
    return cache


def _ops(*parts: dict) -> dict:
    """Operator FLOPs of several forwards, added."""
    out: dict = {}
    for part in parts:
        for op, value in part.items():
            out[op] = out.get(op, 0) + value
    return out


def _linear(ops: dict) -> dict:
    """The projections by name (attention, a sparse layer's indexer scores, a mixer's scan and conv:
    checked per convention)."""
    return {op: v for op, v in ops.items() if op not in ("attention", "indexer", "scan", "conv")}


def prefill(spec: ModelSpec, seq: int, batch: int, tile, device, mla: str = "auto",
            window_cache: str = "whole") -> Job:          # a prefill caches nothing before it
    toks = _later(batch, seq, spec["V"], 0, device)
    return Job("prefill", f"B={batch} S={seq}", lambda m: causal_mask(seq, device=device),
               lambda m, mask: m(toks(), mask, form=calc.mla_form("prefill", mla)),
               lambda conv, precision=None, machine=None: calc.rows(calc.table(
                   spec, "prefill", conv, "last", tile, mla, precision, machine, batch=[batch], seq=[seq]))[0],
               lambda: _linear(calc.operators(spec, "prefill", mla=mla, batch=batch, seq=seq)),
               passes=((batch, seq, seq),), positions=seq, batch=batch)


def varlen_prefill(spec: ModelSpec, lengths: list[int], padded: bool, tile, device, mla: str = "auto",
                   window_cache: str = "whole") -> Job:
    detail = f"{'padded' if padded else 'packed'} lengths={','.join(map(str, lengths))}"
    form = calc.mla_form("prefill", mla)
    parts = [{"batch": len(lengths), "seq": max(lengths)}] if padded else [{"batch": 1, "seq": n} for n in lengths]

    def expected(conv, precision=None, machine=None):
        return calc.varlen_prefill(spec, lengths, padded, conv, "last", tile, mla, precision, machine)

    operators = lambda: _linear(_ops(*(calc.operators(spec, "prefill", mla=mla, **part) for part in parts)))
    if padded:
        toks = _later(len(lengths), max(lengths), spec["V"], 0, device)
        rows = (torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device) - 1)
        return Job("varlen_prefill", detail, lambda m: causal_mask(max(lengths), device=device),
                   lambda m, mask: m(toks(), mask, rows=rows, form=form), expected, operators,
                   passes=((len(lengths), max(lengths), max(lengths)),), positions=max(lengths),
                   batch=len(lengths))
    toks = _later(1, sum(lengths), spec["V"], 0, device)
    ends = torch.tensor(lengths, device=device).cumsum(0) - 1
    rows = (torch.zeros_like(ends), ends)
    return Job("varlen_prefill", detail, lambda m: None,
               lambda m, _: m(toks(), Packed(tuple(lengths)), rows=rows, form=form), expected, operators,
               # one row of sum(lengths) tokens: positions run on across the packed sequences
               passes=((1, sum(lengths), max(lengths)),), positions=sum(lengths))


def cached_prefill(spec: ModelSpec, new: int, prefix: int, batch: int, tile, device, mla: str = "auto",
                   window_cache: str = "whole") -> Job:
    toks = _later(batch, new, spec["V"], 2, device)
    return Job("cached_prefill", f"B={batch} C={new} T={prefix}",
               lambda m: (_fill(m, batch, prefix, prefix + new, device, window_cache),
                          causal_mask(new, prefix, device=device)),
               lambda m, state: m(toks(), state[1], prefix, state[0], form=calc.mla_form("cached_prefill", mla)),
               lambda conv, precision=None, machine=None: calc.rows(calc.table(
                   spec, "cached_prefill", conv, "last", tile, mla, precision, machine, window_cache,
                   batch=[batch], chunk=[new], prefix=[prefix]))[0],
               lambda: _linear(calc.operators(spec, "cached_prefill", mla=mla, batch=batch, chunk=new, prefix=prefix)),
               passes=((batch, prefix, prefix), (batch, new, prefix + new)), positions=prefix + new,
               cache=prefix + new, batch=batch)


def chunked(spec: ModelSpec, seq: int, size: int, batch: int, tile, device, mla: str = "auto",
            window_cache: str = "whole") -> Job:
    toks = _later(batch, seq, spec["V"], 3, device)
    schedule = calc.chunk_schedule(seq, size)
    starts = _starts(schedule)

    def run(m, cache):
        for i, (n, done) in enumerate(zip(schedule, starts)):
            last = i == len(schedule) - 1
            m(toks()[:, done:done + n], causal_mask(n, done, device=device), done, cache,
              logits="last" if last else "none", form=calc.mla_form("cached_prefill", mla))

    def operators():
        return _linear(_ops(*(calc.operators(spec, "cached_prefill", logits="last" if i == len(schedule) - 1
                                             else "none", mla=mla, batch=batch, chunk=n, prefix=done)
                              for i, (n, done) in enumerate(zip(schedule, starts)))))

    return Job("chunked", f"B={batch} S={seq} chunk={size}",
               lambda m: m.new_cache(batch, seq, window_cache), run,
               lambda conv, precision=None, machine=None: calc.chunked(spec, seq, size, 0, batch, conv, "last",
                                                                       tile, mla, precision, machine,
                                                                       window_cache)[-2],
               operators,
               passes=tuple((batch, n, done + n) for n, done in zip(schedule, starts)),
               positions=seq, cache=seq, batch=batch)


def decode(spec: ModelSpec, context: int, batch: int, tile, device, mla: str = "auto",
           window_cache: str = "whole") -> Job:
    toks = _later(batch, 1, spec["V"], 4, device)
    form = calc.mla_form("decode", mla)
    return Job("decode", f"B={batch} T={context}",
               lambda m: (_fill(m, batch, context, context + 1, device, window_cache),
                          causal_mask(1, context, device=device)),
               lambda m, state: m(toks(), state[1], context, state[0], form=form),
               lambda conv, precision=None, machine=None: calc.rows(calc.table(
                   spec, "decode", conv, "last", tile, mla, precision, machine, window_cache, batch=[batch],
                   context=[context]))[0],
               lambda: _linear(calc.operators(spec, "decode", mla=mla, batch=batch, context=context)),
               passes=((batch, context, context), (batch, 1, context + 1)), positions=context + 1,
               cache=context + 1, batch=batch)


def greedy(model: Decoder, prompt: torch.Tensor, new: int, mla: str = "auto",
           window_cache: str = "whole") -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Prefill, then new-1 cached decode steps; returns all tokens and each step's logits.
    MLA layers run the forms ``calc`` charges (auto: naive prefill, absorbed steps)."""
    batch, seq = prompt.shape
    cache = model.new_cache(batch, seq + new, window_cache)
    device = prompt.device
    step_form = calc.mla_form("decode_phase", mla)
    logits = model(prompt, causal_mask(seq, device=device), 0, cache, form=calc.mla_form("prefill", mla))
    steps, tokens = [logits], prompt
    for step in range(new - 1):
        nxt = logits.argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        past = seq + step
        logits = model(nxt, causal_mask(1, past, device=device), past, cache, form=step_form)
        steps.append(logits)
    return torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1), steps


def recompute_gap(model: Decoder, tokens: torch.Tensor, steps: list[torch.Tensor], prompt_len: int) -> float:
    """Max |cached logits - logits recomputed from the whole context|, over every step."""
    gap = 0.0
    for j, cached in enumerate(steps):
        n = prompt_len + j
        full = model(tokens[:, :n], causal_mask(n, device=tokens.device))
        gap = max(gap, (cached.double() - full.double()).abs().max().item())
    return gap


def generate(spec: ModelSpec, prompt: int, new: int, batch: int, tile, device, mla: str = "auto",
             window_cache: str = "whole") -> Job:
    toks = _later(batch, prompt, spec["V"], 5, device)
    return Job("generate", f"B={batch} S={prompt} N={new}", lambda m: None,
               lambda m, _: greedy(m, toks(), new, mla, window_cache),
               lambda conv, precision=None, machine=None: calc.rows(calc.generate_table(
                   spec, conv, "last", tile, mla, precision, machine, batch=[batch], seq=[prompt],
                   new_tokens=[new], window_cache=window_cache))[-1],
               lambda: _linear(_ops(calc.operators(spec, "prefill", mla=mla, batch=batch, seq=prompt),
                                    calc.operators(spec, "decode_phase", mla=mla, batch=batch, seq=prompt,
                                                   new_tokens=new))),
               passes=generation_passes(batch, prompt, new), positions=prompt + new - 1,
               cache=prompt + new, batch=batch)


def generation_passes(batch: int, prompt: int, new: int, recompute: bool = False) -> tuple[tuple[int, int, int], ...]:
    """The forwards of ``greedy`` (prefill, then new-1 steps) and, with ``recompute``, of
    ``recompute_gap`` (every context again, whole)."""
    steps = ((batch, prompt, prompt),) + tuple((batch, 1, prompt + j + 1) for j in range(new - 1))
    if recompute:
        steps += tuple((batch, prompt + j, prompt + j) for j in range(new))
    return steps


def _starts(schedule: list[int]) -> list[int]:
    out, done = [], 0
    for n in schedule:
        out.append(done)
        done += n
    return out


# One job body per workload of the core's registry, by its name (aliases resolve through it).
JOBS = {"prefill": prefill, "varlen_prefill": varlen_prefill, "cached_prefill": cached_prefill,
        "chunked": chunked, "decode": decode, "generate": generate}
GENERATION_NEW = 4      # tokens the generation check generates after each prompt
# The sizes each job runs at for one length S of --seq and the batch B: its arguments after the model.
SIZES = {
    "prefill": lambda seq, batch: [(seq, batch)],
    "varlen_prefill": lambda seq, batch: [([max(1, seq // 8), max(1, seq // 2), max(1, seq // 4)], padded)
                                          for padded in (True, False)],
    "cached_prefill": lambda seq, batch: [(max(1, seq // 4), seq, batch)],
    "chunked": lambda seq, batch: [(seq, max(1, (seq + 2) // 3), batch)],
    "decode": lambda seq, batch: [(seq, batch)],
    "generate": lambda seq, batch: [(max(1, seq // 4), GENERATION_NEW, batch)],
}
assert set(SIZES) == set(JOBS)
