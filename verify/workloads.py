"""Each workload of the cost model as a job the decoder executes, with the core's expected rows.

A ``Job`` has a ``setup`` (uncounted, untimed: filling a KV cache with the prefix, say), a
``run`` (what is counted and timed) and ``expected(convention)``: the row the calculator
gives for the same sizes -- read from ``costcalc.calc``, never re-typed here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from costcalc import calc
from costcalc.spec import ModelSpec
from .model import Decoder, Packed, causal_mask

WORKLOADS = ("prefill", "varlen", "chunk", "chunked", "decode", "generate")


@dataclass
class Job:
    workload: str
    detail: str
    setup: Callable[[Decoder], Any]
    run: Callable[[Decoder, Any], Any]
    expected: Callable[[str], dict]


def _tokens(batch: int, n: int, vocab: int, seed: int, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, n), generator=gen).to(device)


def _fill(model: Decoder, batch: int, prefix: int, capacity: int, device):
    """A cache of ``capacity`` holding ``prefix`` tokens (uncounted setup)."""
    cache = model.new_cache(batch, capacity)
    if prefix:
        model(_tokens(batch, prefix, model.c.V, 1, device), causal_mask(prefix, device=device),
              0, cache, logits="none")
    return cache


def prefill(spec: ModelSpec, seq: int, batch: int, tile, device, mla: str = "auto") -> Job:
    toks = _tokens(batch, seq, spec["V"], 0, device)
    mask = causal_mask(seq, device=device)
    return Job("prefill", f"B={batch} S={seq}", lambda m: None,
               lambda m, _: m(toks, mask, form=calc.mla_form("prefill", mla)),
               lambda conv: calc.prefill(spec, seq, batch, conv, "last", tile, mla))


def varlen(spec: ModelSpec, lengths: list[int], padded: bool, tile, device, mla: str = "auto") -> Job:
    name = "varlen_padded" if padded else "varlen_packed"
    detail = f"lengths={','.join(map(str, lengths))}"
    expected = lambda conv: calc.varlen_prefill(spec, lengths, padded, conv, "last", tile, mla)
    form = calc.mla_form("prefill", mla)
    if padded:
        toks = _tokens(len(lengths), max(lengths), spec["V"], 0, device)
        mask = causal_mask(max(lengths), device=device)
        rows = (torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device) - 1)
        return Job(name, detail, lambda m: None, lambda m, _: m(toks, mask, rows=rows, form=form), expected)
    toks = _tokens(1, sum(lengths), spec["V"], 0, device)
    ends = torch.tensor(lengths, device=device).cumsum(0) - 1
    rows = (torch.zeros_like(ends), ends)
    return Job(name, detail, lambda m: None,
               lambda m, _: m(toks, Packed(tuple(lengths)), rows=rows, form=form), expected)


def chunk(spec: ModelSpec, new: int, prefix: int, batch: int, tile, device, mla: str = "auto") -> Job:
    toks = _tokens(batch, new, spec["V"], 2, device)
    mask = causal_mask(new, prefix, device=device)
    return Job("chunk", f"B={batch} C={new} T={prefix}",
               lambda m: _fill(m, batch, prefix, prefix + new, device),
               lambda m, cache: m(toks, mask, prefix, cache, form=calc.mla_form("chunk", mla)),
               lambda conv: calc.cached_prefill(spec, new, prefix, batch, conv, "last", tile, mla))


def chunked(spec: ModelSpec, seq: int, size: int, batch: int, tile, device, mla: str = "auto") -> Job:
    toks = _tokens(batch, seq, spec["V"], 3, device)
    schedule = calc.chunk_schedule(seq, size)

    def run(m, cache):
        done = 0
        for i, n in enumerate(schedule):
            last = i == len(schedule) - 1
            m(toks[:, done:done + n], causal_mask(n, done, device=device), done, cache,
              logits="last" if last else "none", form=calc.mla_form("chunk", mla))
            done += n

    return Job("chunked", f"B={batch} S={seq} chunk={size}",
               lambda m: m.new_cache(batch, seq), run,
               lambda conv: calc.chunked(spec, seq, size, 0, batch, conv, "last", tile, mla)[-2])


def decode(spec: ModelSpec, context: int, batch: int, tile, device, mla: str = "auto") -> Job:
    toks = _tokens(batch, 1, spec["V"], 4, device)
    mask = causal_mask(1, context, device=device)
    form = calc.mla_form("decode", mla)
    return Job("decode", f"B={batch} T={context}",
               lambda m: _fill(m, batch, context, context + 1, device),
               lambda m, cache: m(toks, mask, context, cache, form=form),
               lambda conv: calc.decode(spec, context, batch, conv, tile, mla))


def greedy(model: Decoder, prompt: torch.Tensor, new: int, mla: str = "auto") -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Prefill, then new-1 cached decode steps; returns all tokens and each step's logits.
    MLA layers run the forms ``calc`` charges (auto: naive prefill, absorbed steps)."""
    batch, seq = prompt.shape
    cache = model.new_cache(batch, seq + new)
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


def generate(spec: ModelSpec, prompt: int, new: int, batch: int, tile, device, mla: str = "auto") -> Job:
    toks = _tokens(batch, prompt, spec["V"], 5, device)
    return Job("generate", f"B={batch} S={prompt} N={new}", lambda m: None,
               lambda m, _: greedy(m, toks, new, mla),
               lambda conv: calc.generate(spec, prompt, new, batch, conv, "last", tile, mla)[-1])
