"""A model's FLOPs crossovers, solved exactly from its compiled terms.

Attention minus the block linear layers of one sequence (B = 1, no LM head; a sparse layer's
attention with its indexer's scores, the part of it that grows with the keys) is, as a function
of the length, a polynomial of degree at most two on each piece between the windows and
attention chunks of the model's layer groups (a window's keys stop growing at W; a chunk's
start again every W_c). Each group's gap is fitted exactly
(rational coefficients, from its compiled recipe at three integer lengths of the piece) on
each side of its window, the groups are added piece by piece, and the first root at or above
length 1 is solved in closed form: a rational, or ``p + q sqrt(m)``. None of it needs sympy.

- ``decode_t_equal``: keys read by a decode step (K = T + 1) where attention equals linear;
- ``prefill_attention_equals_linear``: the prompt length S where they are equal, per convention;
- ``sparse_decode_cheaper`` (a model with sparse MLA layers, DeepSeek Sparse Attention): the
  context T past which a causal decode step of the model costs fewer FLOPs in all than the same
  model with every sparse layer dense (its indexer gone). A sparse layer's step minus its dense
  twin's is ``P_I + u_I (T+1) - u_A (T+1 - min(T+1, k_I))`` (indexer projections, indexer pairs,
  attention pairs saved): positive up to k_I, then linear; summed over the groups it is concave in
  T, so past its first root it stays negative.
"""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any, Iterable, Optional

from .blocks import Block
from .errors import CostcalcError
from .evaluate import Options, Query, operator_terms
from .roots import FOREVER, Poly, Root, add, fit, roots
from .spec import Group, ModelSpec
from .vocab import DEFAULT_TILE, ORDER, TERMS


def crossover(spec: ModelSpec, conventions: Iterable[str] = ("causal", "full"), mla: str = "auto",
              precision=None, batch: int = 1) -> list[dict]:
    """T_equal for decode and the prefill length where attention equals linear, exactly.

    Over a model's layer groups: attention and linear summed over the groups, each at its
    own layer count. Sliding windows make attention piecewise; where it never catches up
    with the linear layers the answer is ``never``. With ``precision`` (dtypes), the decode
    row also gives ``t_equal_time``: the keys at which a step of ``batch`` sequences reads as
    many K/V bytes as weight bytes (``time_root``). On a device ``beside`` adds the batch at which
    a decode step turns compute-bound."""
    if any(g.block.v4 for g in spec.groups):
        raise CostcalcError(f"crossover: {spec.name} has DeepSeek-V4 compressed attention, whose keys grow by one "
                            f"entry every R_c tokens (floor(T / R_c)): no polynomial pieces to solve; not solved")
    rows = [_row(Query(spec, "decode", Options("causal", mla=mla)), "decode_t_equal")]
    if precision is not None:
        root = time_root(Query(spec, "decode", Options(mla=mla), precision), batch)
        rows[0]["t_equal"] = rows[0]["tokens"]
        rows[0]["batch"] = batch
        rows[0].update(precision.labels(spec))   # the time crossover depends on the dtypes, not the device
        rows[0]["t_equal_time"] = None if root is None else root.rounded()
        rows[0]["t_equal_time_exact"] = "never" if root is None else (
            root.text() if len(root.text()) <= 40 else f"{root.value():.6f} (a rational: expected routing)")
        first = ("preset", "workload", "quantity", "convention", "mla", "exact", "tokens", "t_equal_time")
        rows[0] = {**{k: rows[0][k] for k in first if k in rows[0]}, **rows[0]}   # the answer before its details
    for convention in conventions:
        options = Options(convention, mla=mla)
        if options.convention == "tiled":
            raise CostcalcError("crossover: the tiled convention has no closed form; use causal or full")
        rows.append(_row(Query(spec, "prefill", options), "prefill_attention_equals_linear"))
    if any(g.block.sparse for g in spec.groups):
        rows.append(sparse_row(spec, mla))
    return rows


def dense_twin(spec: ModelSpec) -> ModelSpec:
    """The same model with every sparse layer dense: MLA over every legal key, no indexer."""
    groups = tuple(Group(g.count, replace(g.block, sparse=False),
                         {k: v for k, v in g.sizes.items() if k not in ("h_I", "d_I", "k_I")})
                   if g.block.sparse else g for g in spec.groups)
    return replace(spec, groups=groups, arch=groups[0].block.key if spec.arch == spec.groups[0].block.key else spec.arch)


STEP_TERMS = tuple(t.name for t in TERMS if t.name != "lm_head")


def sparse_root(spec: ModelSpec, mla: str = "auto") -> Optional["Root"]:
    """Keys K = T + 1 of a causal decode step (B = 1) at which the model's step costs as many FLOPs
    in all as its ``dense_twin``'s; past it the sparse step is cheaper. None: never."""
    sparse, dense = (Query(m, "decode", Options("causal", mla=mla)) for m in (spec, dense_twin(spec)))
    pairs = list(zip(sparse.recipes(), dense.recipes()))

    def gap_of(index: int, group: Group):
        (_, mine), (twin, theirs) = pairs[index]
        if not group.block.sparse:
            return lambda keys: 0
        base, other = {**group.numbers(), "B": 1}, {**twin.numbers(), "B": 1}

        def gap(keys: int) -> int:        # every term but the LM head (the same on both sides)
            return (sum(mine.evaluate({**base, "T": keys - 1}, STEP_TERMS).values())
                    - sum(theirs.evaluate({**other, "T": keys - 1}, STEP_TERMS).values()))
        return gap

    return solve(spec, gap_of, True, steps=True)


def sparse_row(spec: ModelSpec, mla: str = "auto") -> dict:
    """The ``sparse_decode_cheaper`` row: the crossover in keys (``exact``, ``tokens``: T + 1) and in
    context (``context_exact``, ``context``), and ``first_cheaper_context``: the smallest whole
    context at which the sparse step costs strictly fewer FLOPs."""
    query = Query(spec, "decode", Options("causal", mla=mla))
    root = sparse_root(spec, mla)
    row: dict[str, Any] = {"preset": spec.name, "workload": "crossover", "quantity": "sparse_decode_cheaper",
                           "convention": "causal", "mla": query.form.value}
    if root is None:
        row.update(exact="never", tokens=None, context_exact="never", context=None, first_cheaper_context=None)
    else:
        context = root.shift(-1)
        row.update(exact=root.text(), tokens=root.rounded(), context_exact=context.text(),
                   context=context.rounded(), first_cheaper_context=math.floor(context.value()) + 1)
    row["formula"] = "sparse step < dense step: P_I + u_I (T+1) < u_A (T+1 - min(T+1, k_I)), over layer groups"
    return row


def _row(query: Query, quantity: str) -> dict:
    spec, options = query.spec, query.options
    root = first_root(query)
    row: dict[str, Any] = {"preset": spec.name, "workload": "crossover", "quantity": quantity,
                           "convention": options.convention.value}
    if spec.has_mla:
        row["mla"] = query.form.value
    row.update(exact="never", tokens=None) if root is None else row.update(exact=root.text(),
                                                                           tokens=root.rounded())
    if quantity == "decode_t_equal":   # keys read by the step = cached context + its own key
        row["context_exact"] = "never" if root is None else root.shift(-1).text()
        row["context"] = None if root is None else root.shift(-1).rounded()
    row["formula"] = _formula(query, quantity)
    return row


def _formula(query: Query, quantity: str) -> str:
    spec = query.spec
    if not any(g.block.attends for g in spec.groups):
        return "never (no softmax attention)"
    if not spec.uniform or spec.windows or any(g.block.attention == "chunk" or g.block.sparse
                                                for g in spec.groups):
        return "piecewise over layer groups"
    (_, recipe), = query.recipes("crossover")
    return recipe.constants["decode_t_equal" if quantity == "decode_t_equal" else f"prefill_{query.options.convention.value}"]


# --- the gap, fitted piece by piece -------------------------------------------------------------

def first_root(query: Query) -> Optional["Root"]:
    """The first length >= 1 where attention - linear of the query's workload (prefill: the
    prompt length; decode: keys read) reaches 0, or None."""
    decode = query.workload.phase == "decode"     # keys read: T + 1 at a decode step
    windowed = query.options.convention == "causal" or decode
    recipes = [recipe for _, recipe in query.recipes()]

    def gap_of(index: int, group: Group):
        recipe = recipes[index]
        base = {**group.numbers(), **query.options.values(), "B": 1}

        def gap(x: int) -> int:
            # a sparse layer's attention is its indexer's scores too: the part that grows with the keys
            got = recipe.evaluate({**base, "T": x - 1} if decode else {**base, "S": x}, ["attention", "indexer", "linear"])
            return got.get("attention", 0) + got.get("indexer", 0) - got.get("linear", 0)   # none: no attention
        return gap

    return solve(query.spec, gap_of, windowed, steps=decode)


def time_root(query: Query, batch: int) -> Optional["Root"]:
    """Keys read by a decode step of ``batch`` sequences (the query's, a decode step in its
    dtypes) at which reading the K/V cache moves as many bytes as reading the weights (LM head
    included) -- the time crossover of a memory-bound step, whatever the device."""
    from .roofline import group_experts_touched, routed_expert

    precision = query.precision
    plan = precision.weights(query.spec)
    keys_of = {op: precision.key_bits(op, query.spec) for op in ("attention", "indexer")}   # bits per element
    recipes = [recipe for _, recipe in query.recipes("bytes")]

    def gap_of(index: int, group: Group):
        recipe = recipes[index]
        names = [n for n in recipe.outputs if n.endswith(".weight")]
        base = {**group.numbers(), "B": batch}
        touched = group_experts_touched(group, batch, precision)
        weights = sum(v * (touched if routed_expert(n) else 1) * plan.rate(index, n.rsplit(".", 1)[0])
                      for n, v in recipe.evaluate({**base, "T": 0}, names).items()) * 8

        def gap(keys: int) -> Fraction:
            got = recipe.evaluate({**base, "T": keys - 1}, ["attention.kv_read", "indexer.kv_read"])
            # a sparse layer's index keys too, in the index dtype
            return sum(got.get(f"{op}.kv_read", 0) * bits for op, bits in keys_of.items()) - weights
        return gap

    return solve(query.spec, gap_of, True, steps=True)


MAX_PIECES = 200_000     # chunk pieces walked at most before giving up (a root that far is not solved)


def solve(spec: ModelSpec, gap_of, windowed: bool, steps: bool = False) -> Optional["Root"]:
    """The first root >= 1 of the sum over groups of ``gap_of(index, group)``, each a
    polynomial of degree <= 2 on each piece of the length axis (``_Gap``): cut at windows and
    at the multiples of attention chunks where a query's keys depend on them (``windowed``).
    ``steps``: the length is the keys a decode step reads (a chunk's keys drop back to 1 after
    each multiple of W_c) rather than a prompt length."""
    gaps = [_Gap(group, gap_of(i, group), windowed, steps) for i, group in enumerate(spec.groups)]
    for lo, hi in _pieces(gaps):
        total = add([gap.poly(lo, hi) for gap in gaps])
        for root in roots(total):
            if root.at_least(lo) and (hi == FOREVER or root.at_most(hi)):
                return root
    return None


class _Gap:
    """One group's gap as a polynomial (degree <= 2) on each piece of the length axis: one
    piece; two split at a sliding window W; or, in a chunked layer, one per chunk of W_c
    (prefill: [j W_c, (j+1) W_c]; decode: the keys drop back to 1 after each multiple of W_c)."""

    def __init__(self, group: Group, gap, windowed: bool, steps: bool) -> None:
        self.gap, self.steps = gap, steps
        kind = group.block.attention
        cap = group.sizes["W"] if kind == "window" else group.sizes["k_I"] if group.block.sparse else None
        self.window = cap if windowed and cap is not None and cap > 1 else None   # a sparse top-k: a window
        self.chunk = group.sizes["W_c"] if windowed and kind == "chunk" and group.sizes["W_c"] > 1 else None
        self.fits: dict[tuple[int, float], Poly] = {}

    def piece(self, lo: float) -> tuple[int, float]:
        """The stretch of the axis, starting at or before ``lo``, on which the gap is one polynomial."""
        if self.chunk:
            j = int(lo) // self.chunk
            return max(1, j * self.chunk), (j + 1) * self.chunk
        if self.window:
            return (1, self.window) if lo < self.window else (self.window, FOREVER)
        return 1, FOREVER

    def poly(self, lo: float, hi: float) -> Poly:
        start, end = self.piece(lo)
        if start > lo or end < hi:
            raise AssertionError(f"no piece of a group covers [{lo}, {hi}]")
        if (start, end) not in self.fits:
            first = start + 1 if self.chunk and self.steps and start > 1 else start
            xs = [x for x in (first, first + 1, first + 2) if x <= end] or [first]
            self.fits[(start, end)] = fit(self.gap, xs)
        return self.fits[(start, end)]


def _pieces(gaps: list[_Gap]):
    """Consecutive (lo, hi) stretches on which every group's gap is one polynomial: cut at each
    window, and at each multiple of a chunk up to where the answer is settled (``_horizon``)."""
    windows = sorted({g.window for g in gaps if g.window})
    chunks = sorted({g.chunk for g in gaps if g.chunk})
    if not chunks:
        edges = [1] + windows + [FOREVER]
        yield from ((lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo)
        return
    horizon = _horizon(gaps, windows, chunks)
    if horizon / chunks[0] > MAX_PIECES:
        raise CostcalcError(f"crossover: attention chunks of {chunks[0]} put the answer beyond "
                            f"{MAX_PIECES} chunk pieces (length {horizon}); not solved")
    cuts = set(windows)
    for size in chunks:
        cuts.update(range(size, horizon + size, size))
    edges = [1] + sorted(c for c in cuts if c > 1)
    yield from zip(edges, edges[1:])


def _horizon(gaps: list[_Gap], windows: list[int], chunks: list[int]) -> int:
    """A length past which the sign of the gap is settled: a chunked group's gap lies between its
    value at whole chunks (``top``, a polynomial through x = W_c, 2 W_c, 3 W_c) and ``top`` minus
    its largest dip within a chunk; beyond every window, the sum of the tops (or of the lower
    bounds) is a polynomial whose last root bounds where the first root can lie -- or, where the
    tops stay below zero, past which there is none. Where neither settles it (a gap flat in
    the length), one common period of the chunks beyond the windows is walked."""
    start = max(windows + chunks)
    top: list[Poly] = []
    dip = Fraction(0)
    for g in gaps:
        if g.chunk:
            size = g.chunk
            poly = fit(g.gap, [size, 2 * size, 3 * size])
            inside = [size + size // 2, size + (size + 1) // 2, size + 1]
            dip += max(_value(poly, x) - g.gap(x) for x in inside)
        else:
            poly = g.poly(*g.piece(start))
        top.append(poly)
    upper = add(top)
    lower = (upper[0] - dip, upper[1], upper[2])
    for poly in (lower, upper):     # settled where the bound keeps one sign from some length on
        lead = next((c for c in reversed(poly) if c != 0), Fraction(0))
        if lead == 0:
            continue
        if (lead > 0) == (poly is lower):
            values = [r.value() for r in roots(poly)]
            return max([start] + [math.ceil(v) + 1 for v in values]) + max(chunks)
    return start + math.lcm(*chunks) + max(chunks)


def _value(poly: Poly, x: int) -> Fraction:
    return poly[0] + poly[1] * x + poly[2] * x * x


def attention_fraction(seq: int, convention: str, tile: tuple[int, int] = DEFAULT_TILE) -> Fraction:
    """Attention under ``convention`` over the full rectangle, for one uncached prefill of ``seq``:
    (S+1)/2S for causal, what a tile kernel keeps for tiled. Sizes cancel: every one is 1."""
    from .evaluate import positive

    ones = {**{name: 1 for name in ORDER}, "S": positive("seq", seq), "b_q": tile[0], "b_k": tile[1]}
    model = ModelSpec("ones", "gqa.dense", ones, groups=(Group(1, Block(), ones),))
    part, full = (next(Query(model, "prefill", Options(c, tile=tile)).recipes())[1].evaluate(ones, ["attention"])
                  ["attention"] for c in (convention, "full"))
    return Fraction(part, full)


# --- the batch at which a decode step turns compute-bound ---------------------------------------

MAX_BATCH = 2**40      # ranges.MAX_VALUE: past it a batch is "never"


def beside(rows: list[dict], step: Query, context: Optional[int] = None) -> list[dict]:
    """``crossover``'s rows with, in its decode row, the device and ``compute_bound`` of ``step`` (a
    decode step's query on a device) at ``context`` cached tokens: the one given, else T_equal's
    context (the row's), else 1 where T_equal is never."""
    first = rows[0]
    at = context if context is not None else first["context"] if first.get("context") is not None else 1
    first = {**first, "device": step.machine.device.name, **compute_bound(step, math.ceil(at))}
    order = list(first)      # the step's batch beside the time crossover, before the details
    order.remove("compute_bound_batch")
    order.insert(order.index("t_equal_time") + 1 if "t_equal_time" in order else len(order), "compute_bound_batch")
    return [{k: first[k] for k in order}] + rows[1:]


def compute_bound(query: Query, context: int) -> dict[str, Any]:
    """The batch B at which a decode step over ``context`` cached tokens (the query's: its dtypes,
    its device) turns compute-bound: where its compute time, sum of FLOPs / peak over its operators,
    passes its memory time, sum of bytes / bandwidth -- the step's ``bound`` column; and the same for
    each term (``<term>_bound``). Both sides are exact rationals of B (FLOPs and bytes from the
    compiled recipes, ``roofline.point``; the peak and bandwidth the device's floats, exactly).
    Without routed experts they are linear in B: compute - memory = g0 + g1 B, and the crossover
    is the rational ``-g0 / g1`` (``<..>_exact``), the step compute-bound at every whole batch above
    it (``compute_bound_batch``: the first; memory-bound at and below it: a tie is memory's).
    ``always``: compute-bound at every batch (g0 >= 0 < g1, e.g. attention, whose FLOPs and bytes
    both grow with B); ``never``: memory-bound at every batch. With routed experts the weights read
    grow with the experts the batch touches (expected routing: not linear in B, no rational root):
    the first whole batch is found exactly by bisection (the gap is convex: linear FLOPs less
    concave bytes) and ``_exact`` says so."""
    from .roofline import Precision, point

    machine = query.machine
    precision = query.precision or Precision()
    query = query.but(precision=precision)
    peak, bandwidth = Fraction(machine.peak(precision)), Fraction(machine.bandwidth())
    term_of = operator_terms(query)
    cache: dict[int, dict[str, Fraction]] = {}

    def gaps(batch: int) -> dict[str, Fraction]:
        """compute - memory time of the step and of each term at ``batch``, exactly."""
        if batch not in cache:
            ops = point(query, {"B": batch, "T": context}, per_operator=True)["operators"]
            out: dict[str, Fraction] = {"step": Fraction(0)}
            for op, got in ops.items():
                gap = Fraction(got["flops"]) / peak - Fraction(got["bytes"]) / bandwidth
                term = term_of.get(op, op)
                out[term] = out.get(term, Fraction(0)) + gap
                out["step"] += gap
            cache[batch] = out
        return cache[batch]

    names = list(gaps(1))
    row: dict[str, Any] = {"compute_bound_context": context}
    for name in names:
        g1, g2, g3 = (gaps(b).get(name, Fraction(0)) for b in (1, 2, 3))
        linear = g3 - 2 * g2 + g1 == 0 and _linear(gaps, name, g1, g2 - g1)
        if linear:
            first, exact = _linear_root(g1, g2 - g1)
        else:
            first, exact = _first_positive(lambda b: gaps(b).get(name, Fraction(0)) > 0), \
                "no rational root (routed experts: the experts read grow with B)"
        prefix = "" if name == "step" else f"{name}_"
        row[f"{prefix}compute_bound_batch"] = first
        row[f"{prefix}compute_bound_batch_exact"] = exact
    return row


def _linear(gaps, name: str, g1: Fraction, slope: Fraction) -> bool:
    """Whether a gap that is linear at B = 1, 2, 3 is so far out too (a routed expert's bytes bend
    only slowly: checked at a large batch)."""
    far = 1 << 20
    return gaps(far).get(name, Fraction(0)) == g1 + slope * (far - 1)


def _linear_root(g1: Fraction, slope: Fraction) -> tuple[Optional[int], str]:
    """The first whole batch >= 1 where g1 + slope (B - 1) > 0, and the crossover's text."""
    if slope <= 0:
        return (1, "always") if g1 > 0 else (None, "never")
    root = 1 - g1 / slope            # where the gap is 0
    if root <= 0:
        return 1, "always"
    first = max(1, math.floor(root) + 1)
    text = str(root)
    return first, text if len(text) <= 40 else f"{float(root):.6f} (a rational)"


def _first_positive(positive) -> Optional[int]:
    """The first whole batch in [1, MAX_BATCH] where ``positive`` holds (it stays so past it), or None."""
    if positive(1):
        return 1
    hi = 2
    while not positive(hi):
        if hi >= MAX_BATCH:
            return None
        hi *= 2
    lo = hi // 2                       # positive(hi), not positive(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if positive(mid) else (mid, hi)
    return hi
