"""Speculative decoding as a workload, composed from compiled workloads (docs/cost-model.md,
"Speculative decoding"; no closed form of its own).

One speculative step over T cached tokens, B sequences:

- the drafter proposes K tokens as vLLM's proposer runs it (``vllm/v1/spec_decode/eagle.py``,
  ``EagleProposer.propose``): a first forward over the K + 1 tokens the target just verified (the
  compiled ``cached_prefill`` of C = K + 1 over T, the last logits), then K - 1 single-token forwards
  (a ``decode_phase`` at S = T + K + 1, N = K) -- a draft model's own (``proposals``), or the target's
  MTP module's (``--draft mtp``, its ``draft`` term);
- the target verifies them: one forward of K+1 new tokens over T cached ones with logits at every
  new position -- exactly ``prefill --cached-prefix T --seq K+1 --logits all`` (``cached_prefill``).

With acceptance rates a_1..a_K by position (one rate a: a_i = a), the tokens a step yields in
expectation, the target's own (bonus or correcting) token counted, are
E = 1 + sum_i prod_{j<=i} a_j, i.e. (1 - a^(K+1)) / (1 - a) for one rate (Leviathan, Kalman and
Matias 2023, arXiv 2211.17192). Costs per accepted token are the step's over B x E tokens, its
time per token the step's time over E.

``step`` gives the rows of a step at many points (lists or arrays of batch and context);
``best_k`` searches K = 1..kmax for the least time (or FLOPs) per token; ``break_even`` solves the
acceptance at which a step's time per token equals a plain decode step's; ``over_k`` is
``costcalc speculate``'s table; ``generation`` a whole generation's phases.
"""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any, Optional, Sequence

from . import evaluate
from .core.registry import workload as find
from .errors import CostcalcError
from .evaluate import Options, Query, Table
from .vocab import Draft, Logits, MlaForm

DEFAULT_KMAX = 8   # ``best_k`` and ``costcalc speculate`` search K = 1..this unless told
DRAFT_PREFIX = evaluate.DraftRecipe.PREFIX     # the MTP module's operators in a drafting query (mtp.*)


def rates(options: Options, tokens: Optional[int] = None) -> tuple[Fraction, ...]:
    """The acceptance rate of each drafted position 1..K (K: ``tokens``, else the options')."""
    k = options.draft_tokens if tokens is None else tokens
    given = options.acceptance
    if given is None:
        raise CostcalcError("speculative decoding needs an acceptance rate (--acceptance)")
    if len(given) == 1:
        return given * k
    if k > len(given):
        raise CostcalcError(f"--acceptance gives {len(given)} rates by position: K = {k} needs as many")
    return tuple(given[:k])


def expected_tokens(acceptance: Sequence[Fraction]) -> Fraction:
    """Tokens a step yields in expectation: 1 + sum_i prod_{j<=i} a_j (the target's own token
    counted; rates by position, ``acceptance[i]`` the i+1-th draft's). Exact."""
    total, run = Fraction(1), Fraction(1)
    for a in acceptance:
        run *= Fraction(a)
        total += run
    return total


def plain(query: Query) -> Query:
    """The plain decode step the speculation replaces (no draft)."""
    return query.but(workload="decode", draft=Draft.none, draft_model=None, draft_tokens=1, acceptance=None, draft_tp=None)


def verify(query: Query) -> Query:
    """The verify step's query: a cached prefill with logits at every new position, no draft. Its
    MLA form under ``--mla auto`` is a decode step's (absorbed): engines run a verify of K+1 tokens
    through their decode kernels (docs/cost-model.md, "Speculative decoding")."""
    form = MlaForm.absorbed if query.options.mla == MlaForm.auto else query.options.mla
    return query.but(workload="cached_prefill", logits=Logits.all, draft=Draft.none, draft_model=None, draft_tp=None,
                     draft_tokens=1, acceptance=None, mla=form)


def drafting(query: Query, workload: str = "decode_phase") -> Query:
    """A drafter's forward as a query of ``workload``: the draft model's own (its options: the
    convention, MLA form and window cache of the target's, its own layout; the query's dtypes and
    device), or the target's with its MTP module as the draft (read from its ``draft`` term)."""
    model = query.options.draft_model
    form = verify(query).options.mla if workload == "cached_prefill" else query.options.mla   # a few tokens: as
    if model is not None:                                                                       # the verify runs them
        return Query(model, workload, replace(draft_options(query), mla=form), query.precision, query.machine)
    return query.but(workload=workload, draft_tokens=1, acceptance=None, mla=form, logits=Logits.last)


def proposals(query: Query, batch: list[int], context: list[int], k: int) -> list[tuple[Query, dict]]:
    """The drafter's forwards of one step, each (its query, its inputs), as vLLM's proposer runs them
    (``vllm/v1/spec_decode/eagle.py``, ``propose``: its first forward over every token the target ran,
    ``num_tokens = target_token_ids.shape[0]``, logits at each sequence's last; then K - 1 forwards of
    one token a sequence): a cached prefill of the K + 1 tokens just verified over the T cached, then
    K - 1 decode steps over T + K + 1 onwards (a ``decode_phase`` of N = K)."""
    n = len(batch)
    out = [(drafting(query, "cached_prefill"), {"batch": batch, "chunk": [k + 1] * n, "prefix": context})]
    if k > 1:
        out.append((drafting(query), {"batch": batch, "seq": [t + k + 1 for t in context], "new_tokens": [k] * n}))
    return out


def _drafted(query: Query, batch: list[int], context: list[int], k: int) -> dict[str, list]:
    """The drafter's costs at each point, its forwards (``proposals``) added: ``flops`` and, with dtypes,
    ``bytes``; with a device ``time``; under a layout ``flops_per_device`` and ``comm`` (one device's). A
    draft model's whole rows (its own layout's columns; whole on one device: its FLOPs, no collective); the
    MTP module's ``draft`` term, its operators (mtp.*) and its own collectives (``parallel.draft_comm``),
    met under --overlap."""
    n, model = len(batch), query.options.draft_model is not None
    out: dict[str, list] = {}
    for drafter, inputs in proposals(query, batch, context, k):
        got = _answer(drafter, **inputs)
        part = {"flops": got["total_flops" if model else "draft_flops"]}
        if query.traffic:
            part["bytes"] = got["total_bytes" if model else "draft_bytes"]
        if query.machine is not None:
            part["time"] = got["time_s" if model else "draft_time_s"]
        if not query.options.layout.single:
            from . import parallel

            point = {i.symbol: inputs[i.column] for i in drafter.workload.inputs}
            if model:
                part["flops_per_device"] = got.get("flops_per_device", got["total_flops"])
                part["comm"] = got.get("comm_time_s", [0.0] * n)
            else:
                ops = parallel.operator_columns(drafter, point, n, sharded=True)
                part["flops_per_device"] = [parallel.number(sum(column[i] for op, column in ops.items()
                                                                if op.startswith(DRAFT_PREFIX))) for i in range(n)]
                if query.machine is not None:
                    part["comm"] = [parallel.draft_comm(drafter, {key: v[i] for key, v in point.items()})
                                    for i in range(n)]
                    part["time"] = [parallel.step_time(t, c, query.options.overlap)
                                    for t, c in zip(part["time"], part["comm"])]
        for key, values in part.items():
            out[key] = [a + b for a, b in zip(out[key], values)] if key in out else list(values)
    return out


def draft_options(query: Query) -> Options:
    """A draft model's options: the target's convention, tile, MLA form and window cache, the last
    position's logits, and its own layout (``Options.draft_layout``: the target's replicas at
    ``--draft-tp``) under the target's --overlap."""
    o = query.options
    own = o.draft_layout
    return Options(o.convention, Logits.last, o.tile, o.mla, o.window_cache, tp=own.tp, dp=own.dp, overlap=o.overlap)


def _answer(query: Query, **inputs: Sequence[int]) -> Table:
    """A compiled workload's FLOPs and, with dtypes or a device, its bytes and time; under a layout its
    per-device columns (``parallel.columns``: ``time_s`` is then one device's step on the layout)."""
    out = evaluate.table(query, **inputs)
    point = {i.symbol: out[i.column] for i in query.workload.inputs}
    if query.traffic:
        from .roofline import row_columns

        out.update(row_columns(query, point, out["total_flops"]))
    if not query.options.layout.single:
        from . import parallel

        out.update(parallel.columns(query, point, len(out["total_flops"])))
    return out


def _ints(values: Sequence[int]) -> list[int]:
    return evaluate.ints(values, len(values))


def step(query: Query, batch: Sequence[int], context: Sequence[int], tokens: Optional[int] = None) -> Table:
    """A speculative step's rows at every point (``batch``, ``context``: equal-length columns, lists
    or int64 arrays; ``tokens``: K, else the query's): the verify's FLOPs by term, ``draft_flops``
    (the drafter's K steps), ``total_flops``, ``expected_tokens_per_step`` E and the FLOPs per
    accepted token; with dtypes or a device the bytes (verify, draft, total, per token), with a
    device the times (``time_per_token_s`` = time / E), the rates and ``fits``."""
    if query.options.acceptance is None:
        raise CostcalcError("speculative decoding needs an acceptance rate (--acceptance)")
    k = query.options.draft_tokens if tokens is None else evaluate.positive("--draft-tokens", tokens)
    e = expected_tokens(rates(query.options, k))
    batch, context = _ints(batch), _ints(context)
    n = evaluate.check_inputs(find("decode"), {"batch": batch, "context": context})
    checked = verify(query)
    v = _answer(checked, batch=batch, chunk=[k + 1] * n, prefix=context)
    d = _drafted(query, batch, context, k)
    out: Table = {"preset": [query.spec.name] * n, "workload": ["decode"] * n}
    out.update({key: [value] * n for key, value in {**checked.labels(), **_draft_label(query)}.items()})
    out.update({"draft_tokens": [k] * n, "acceptance": [label(query.options.acceptance)] * n,
                "batch": batch, "context": context})
    terms = [key for key in v if key.endswith("_flops") and key != "total_flops"]
    out.update({key: v[key] for key in terms})
    out["draft_flops"] = d["flops"]
    out["total_flops"] = [a + b for a, b in zip(v["total_flops"], out["draft_flops"])]
    out["expected_tokens_per_step"] = [float(e)] * n
    out["total_flops_per_token"] = [float(t / (b * e)) for t, b in zip(out["total_flops"], batch)]
    if query.traffic:
        labels = list(v)[list(v).index("total_flops") + 1:]
        out.update({key: v[key] for key in labels[:next(i for i, x in enumerate(labels) if x.endswith("_bytes"))]})
        out["verify_bytes"], out["draft_bytes"] = v["total_bytes"], d["bytes"]
        out["total_bytes"] = [a + b for a, b in zip(v["total_bytes"], d["bytes"])]
        out["total_bytes_per_token"] = [float(t / (b * e)) for t, b in zip(out["total_bytes"], batch)]
    drafted = d.get("time")
    if not query.options.layout.single:       # one device's: the verify's on its layout, the draft's on its own
        out["flops_per_device"] = [a + b for a, b in zip(v["flops_per_device"], d["flops_per_device"])]
        if query.machine is not None:
            out["comm_time_s"] = [a + b for a, b in zip(v["comm_time_s"], d["comm"])]
    if query.machine is not None:
        out["verify_time_s"], out["draft_time_s"] = v["time_s"], drafted
        out["time_s"] = [a + b for a, b in zip(v["time_s"], drafted)]
        out["time_per_token_s"] = [t / float(e) for t in out["time_s"]]
        out["tokens_per_s"] = [float(e) / t if t else None for t in out["time_s"]]
        out["batch_tokens_per_s"] = [b * float(e) / t if t else None for b, t in zip(batch, out["time_s"])]
        from . import fitting

        out["fits"] = fitting.column(query, batch, [t + k + 1 for t in context])
    return out


def _draft_label(query: Query) -> dict[str, str]:
    """The drafter a row says it ran, and under a layout a draft model's own (``draft_layout``)."""
    o = query.options
    if o.draft_model is None:
        return {"draft": o.draft.value}
    return {"draft": o.draft_model.name, **({} if o.layout.single else {"draft_layout": o.draft_layout.label})}


def label(acceptance: Sequence[Fraction]) -> str:
    """Acceptance rates as given: decimals where exact, else fractions (``0.8``, ``0.8,0.7``)."""
    return ",".join(_decimal(a) for a in acceptance)


def _decimal(a: Fraction) -> str:
    for places in range(1, 13):
        scaled = a * 10 ** places
        if scaled.denominator == 1:
            return f"{float(a):.{places}f}"
    return str(a)


def cost(row_table: Table, by: str) -> list[float]:
    """The per-token figure K is chosen by: ``time`` (``time_per_token_s``) or ``flops``."""
    return row_table["time_per_token_s"] if by == "time" else row_table["total_flops_per_token"]


def _by(query: Query, by: Optional[str]) -> str:
    by = by or ("time" if query.machine is not None else "flops")
    if by not in ("time", "flops"):
        raise CostcalcError(f"K is chosen by time or flops, got {by!r}")
    if by == "time" and query.machine is None:
        raise CostcalcError("the best K by time needs a device (--device)")
    return by


def kmax_of(query: Query, kmax: Optional[int]) -> int:
    """The largest K searched: ``kmax``, else DEFAULT_KMAX (or as many rates as given by position)."""
    given = query.options.acceptance or ()
    if kmax is None:
        return len(given) if len(given) > 1 else DEFAULT_KMAX
    kmax = evaluate.positive("--kmax", kmax)
    if kmax > evaluate.MAX_DRAFT_TOKENS:
        raise CostcalcError(f"--kmax must be at most {evaluate.MAX_DRAFT_TOKENS}, got {kmax}")
    if len(given) > 1 and kmax > len(given):
        raise CostcalcError(f"--kmax {kmax}: --acceptance gives rates for {len(given)} positions only")
    return kmax


def best_k(query: Query, batch: Sequence[int], context: Sequence[int], kmax: Optional[int] = None,
           by: Optional[str] = None) -> list[int]:
    """At each point, the K in 1..kmax whose step costs least per accepted token (``by``: ``time``
    with a device, else ``flops``; ties go to the smaller K). Vectorised over the points: one
    ``step`` per K."""
    by, kmax = _by(query, by), kmax_of(query, kmax)
    best: list[tuple[float, int]] = []
    for k in range(1, kmax + 1):
        got = cost(step(query, batch, context, k), by)
        best = [(c, k) for c in got] if not best else [min(b, (c, k)) for b, c in zip(best, got)]
    return [k for _, k in best]


def break_even(query: Query, batch: Sequence[int], context: Sequence[int],
               tokens: Optional[int] = None) -> list[Optional[float]]:
    """At each point, the one acceptance rate a at which a step of K drafts costs as much time per
    token as a plain decode step: E(a, K) = step time / decode time, solved for a in [0, 1) (E
    rises from 1 at a = 0 towards K + 1). 0.0 where speculation wins even at a = 0; None where it
    cannot win below a = 1. Needs a device."""
    if query.machine is None:
        raise CostcalcError("the break-even acceptance compares times: it needs a device (--device)")
    k = query.options.draft_tokens if tokens is None else tokens
    times = step(query.but(acceptance=(Fraction(0),), draft_tokens=k), batch, context, k)["time_s"]   # a does not
    decoded = _answer(plain(query), batch=_ints(batch), context=_ints(context))["time_s"]
    return [_solve(s / p, k) for s, p in zip(times, decoded)]


def _solve(ratio: float, k: int) -> Optional[float]:
    """The a in [0, 1) with 1 + a + ... + a^k = ratio (bisection: the sum rises with a)."""
    if ratio <= 1:
        return 0.0
    if ratio >= k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(k + 1)) < ratio:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2


def over_k(query: Query, batch: int, context: int, kmax: Optional[int] = None) -> Table:
    """``costcalc speculate``: a step's row for each K = 1..kmax at one point, with the plain decode
    step's time (or FLOPs) per token beside it, the ``speedup`` over it, the break-even acceptance
    (with a device) and ``best`` (true on the K that costs least per token)."""
    kmax = kmax_of(query, kmax)
    by = _by(query, None)
    rows = [step(query, [batch], [context], k) for k in range(1, kmax + 1)]
    out: Table = {key: [r[key][0] for r in rows] for key in rows[0]}
    base = _answer(plain(query), batch=[batch], context=[context])
    if by == "time":
        out["decode_time_per_token_s"] = base["time_s"] * kmax
        out["speedup"] = [base["time_s"][0] / t for t in out["time_per_token_s"]]
        if len(query.options.acceptance) == 1:
            out["break_even_acceptance"] = [break_even(query, [batch], [context], k)[0] for k in range(1, kmax + 1)]
    else:
        per = base["total_flops"][0] / batch
        out["decode_flops_per_token"] = [per] * kmax
        out["speedup"] = [per / f for f in out["total_flops_per_token"]]
    costs = cost(out, by)
    out["best"] = [c == min(costs) and costs.index(c) == i for i, c in enumerate(costs)]
    return _answers_first(out)


# The columns ``costcalc speculate`` is asked for, placed right after K: a table narrowed to the
# terminal's width keeps them and gives up the breakdown first.
ANSWERS = ("expected_tokens_per_step", "time_per_token_s", "speedup", "best", "break_even_acceptance",
           "total_flops_per_token")


def _answers_first(table: Table) -> Table:
    keys = list(table)
    at = keys.index("draft_tokens") + 1 if "draft_tokens" in keys else 0
    head = [k for k in keys[:at] if k not in ANSWERS]
    ordered = head + [k for k in ANSWERS if k in table] + [k for k in keys if k not in head and k not in ANSWERS]
    return {k: table[k] for k in ordered}


def steps(new_tokens: int, expected: Fraction) -> int:
    """Speculative steps a generation of N tokens runs after its prefill (which yields the first):
    ceil((N - 1) / E), the tokens accruing at E a step (the fluid approximation: each step yields
    its expectation; the last may yield more than it needs)."""
    return math.ceil((new_tokens - 1) / expected) if new_tokens > 1 else 0


def contexts(seq: int, new_tokens: int, expected: Fraction) -> list[int]:
    """The cached tokens before each step: S + floor(i E) for i = 0 .. steps - 1."""
    return [seq + math.floor(i * expected) for i in range(steps(new_tokens, expected))]


def generation(query: Query, batch: Sequence[int], seq: Sequence[int], new_tokens: Sequence[int]) -> Table:
    """Speculative generations at every point: three rows a point. ``prefill``: the target's prefill
    of S (with ``mtp``, its module over the prompt too, as a plain ``--draft mtp`` generation; a draft
    model's own prefill of S as ``draft_flops``); ``decode``: ``steps`` speculative steps, the i-th
    over S + floor(i E) cached tokens (``contexts``); ``total``. With a device: ``ttft_s`` (the
    prefill), ``tpot_s`` (the decode phase / (N - 1)), the rates, and ``fits`` at S + N - 1."""
    n = evaluate.check_inputs(find("generate"), {"batch": batch, "seq": seq, "new_tokens": new_tokens})
    k = query.options.draft_tokens
    e = expected_tokens(rates(query.options))
    rows: list[dict[str, Any]] = []
    for b, s, new in zip(_ints(batch), _ints(seq), _ints(new_tokens)):
        first = _prefill(query, b, s)
        at = contexts(s, new, e)
        steps_ = step(query, [b] * len(at), at) if at else {}
        decode = {key: sum(values) for key, values in steps_.items() if _summed(key)}
        head = {"preset": query.spec.name, "workload": "generate", **verify(query).labels(), **_draft_label(query)}
        if query.precision is not None or query.machine is not None:      # what its bytes and times are of
            from .roofline import labels

            head.update(labels(query))
        shape = {"batch": b, "seq": s, "new_tokens": new, "draft_tokens": k,
                 "acceptance": label(query.options.acceptance), "expected_tokens_per_step": float(e)}
        phases = [{**head, "phase": "prefill", **shape, "steps": 0, **first},
                  {**head, "phase": "decode", **shape, "steps": len(at), **decode}]
        total = {key: phases[0].get(key, 0) + phases[1].get(key, 0) for key in [*first, *decode] if _summed(key)}
        phases.append({**head, "phase": "total", **shape, "steps": len(at), **total})
        if query.machine is not None:
            from .composites import generation_rates

            got = generation_rates([b], [new], [first["time_s"]], [decode.get("time_s", 0.0)])
            phases[-1].update({key: values[0] for key, values in got.items()})
            from . import fitting

            for row, held in zip(phases, (s, s + new - 1, s + new - 1)):
                row["fits"] = fitting.fits(query, b, held)
        rows.extend(phases)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    flops = [key for key in keys if key.endswith("_flops") and key not in ("draft_flops", "total_flops")]
    order = [key for key in keys if not key.endswith("_flops")]
    at_flops = order.index("steps") + 1
    parts = [k for k in order[at_flops:] if k.startswith(("verify_", "draft_"))]   # the step's parts last
    order = order[:at_flops] + flops + ["draft_flops", "total_flops"] + [k for k in order[at_flops:] if k not in parts]
    order += parts
    return {key: [row.get(key, 0 if key.endswith(("_flops", "_bytes", "time_s")) and key not in
                          ("ttft_s", "tpot_s") else None) for row in rows] for key in order}


def _summed(key: str) -> bool:
    return (key.endswith(("_flops", "_bytes", "time_s", "flops_per_device")) and not key.endswith("_per_token")
            and key not in ("ttft_s", "tpot_s"))


def _prefill(query: Query, batch: int, seq: int) -> dict[str, Any]:
    """The prefill phase's FLOPs by term (``draft_flops``: the MTP module over the prompt, or the
    draft model's own prefill), and with dtypes or a device its bytes and time."""
    target = query.but(workload="prefill", draft_model=None, draft_tokens=1, acceptance=None, draft_tp=None)
    got = _answer(target, batch=[batch], seq=[seq])
    out = {key: got[key][0] for key in got if key.endswith("_flops")}
    moved = {key: got[key][0] for key in ("total_bytes", "flops_per_device", "comm_time_s", "time_s") if key in got}
    model = query.options.draft_model
    out.setdefault("draft_flops", 0)
    if model is not None:
        own = Query(model, "prefill", draft_options(query), query.precision, query.machine)
        extra = _answer(own, batch=[batch], seq=[seq])
        out["draft_flops"] = extra["total_flops"][0]
        out["total_flops"] += extra["total_flops"][0]
        # the draft on one device whole (--draft-tp 1, one replica): its FLOPs are that device's, no collective
        single = {"flops_per_device": extra["total_flops"], "comm_time_s": [0.0]}
        moved = {key: value + extra.get(key, single.get(key))[0] for key, value in moved.items()}
    return {**out, **moved}
