"""Pipeline schedules as data: which stage runs which micro-batch's forward (F) or backward (B) at
each time slot, and the bubble and makespan counted from that table (docs/cost-model.md, "Pipeline
parallelism").

A schedule is first an ORDER: per rank (a device of the pipeline), the actions it runs one after
another -- ``gpipe`` (GPipe, Huang et al. 2019: every forward, then every backward), ``1f1b``
(PipeDream-Flush / Megatron's 1F1B, Narayanan et al. 2021: p - 1 - r forwards to warm up, then one
forward and one backward in turn, then the backwards left), ``interleaved`` (Megatron's interleaved
1F1B: v model chunks a rank, stage ``c p + r`` on rank r, the warm-up and chunk order of
torch.distributed.pipelining's ``ScheduleInterleaved1F1B``). These are the orders torch 2.13's
``pipeline_order`` lists (tests/test_pipeline.py holds them to it). Then a TABLE: every action
started as soon as its rank is free and its inputs are there (the forward of a micro-batch on the
stage before; the backward on the stage after, and its own forward), with each stage's durations.
With unit slots (every action one slot) the idle slots over all slots is the bubble: (p-1)/(m+p-1)
for GPipe and 1F1B, (p-1)/(v m + p-1) interleaved. torch's own tables pad their idle steps with
``None`` for alignment ("skipped at execution"), so their bubble is not counted from them.

Inference runs forward-only tables (``backward=False``); a training step the F+B tables. No torch,
no device here: pure functions of (schedule, p, m, v) and durations.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple, Optional, Sequence

from .errors import CostcalcError

GPIPE, ONE_F_ONE_B, INTERLEAVED = "gpipe", "1f1b", "interleaved"
SCHEDULES = (GPIPE, ONE_F_ONE_B, INTERLEAVED)
F, B = "F", "B"


class Action(NamedTuple):
    """One stage's forward or backward of one micro-batch (``stage``: 0 .. p v - 1, on rank stage % p)."""
    stage: int
    kind: str
    mb: int

    def __str__(self) -> str:      # as torch prints an _Action: 0F3
        return f"{self.stage}{self.kind}{self.mb}"


Table = list[list[Optional[Action]]]   # per rank, per time slot: an action or None (idle)


def order(schedule: str, p: int, m: int, v: int = 1, backward: bool = True) -> list[list[Action]]:
    """Per rank, the actions it runs in order. ``backward`` False: forwards only (inference), in
    micro-batch order on every rank whatever the schedule."""
    _check(schedule, p, m, v)
    if not backward or schedule == GPIPE:
        return [[Action(c * p + r, F, i) for c in range(v) for i in range(m)]
                + ([Action(c * p + r, B, i) for c in reversed(range(v)) for i in range(m)] if backward else [])
                for r in range(p)]
    if schedule == ONE_F_ONE_B:
        return [_one_f_one_b(r, p, m) for r in range(p)]
    return [_interleaved(r, p, m, v) for r in range(p)]


def _one_f_one_b(r: int, p: int, m: int) -> list[Action]:
    warm = min(p - 1 - r, m)
    out = [Action(r, F, i) for i in range(warm)]
    for i in range(m - warm):
        out += [Action(r, F, warm + i), Action(r, B, i)]
    return out + [Action(r, B, i) for i in range(m - warm, m)]


def _interleaved(r: int, p: int, m: int, v: int) -> list[Action]:
    """Megatron's interleaved 1F1B as torch 2.13 builds it (``_get_warmup_ops`` and
    ``_get_1f1b_rank_ops`` without zero bubble): m micro-batches in rounds of m // max(1, m // p),
    2 (p - 1 - r) extra warm-up forwards a hop from the last rank."""
    per_round = m // max(1, m // p)
    warm = min((v - 1) * per_round + 2 * (p - 1 - r), m * v)
    total = m * v
    done = {F: [0] * v, B: [0] * v}
    out: list[Action] = []

    def run(kind: str, chunk: int) -> None:
        out.append(Action(chunk * p + r, kind, done[kind][chunk]))
        done[kind][chunk] += 1

    for k in range(total + warm):        # torch's ops: warm-up forwards, forward + backward pairs, cool-down backwards
        if k < total:
            run(F, (k // per_round) % v)
        if k >= warm:
            run(B, v - 1 - ((k - warm) // per_round) % v)
    return out


def table(schedule: str, p: int, m: int, v: int = 1, backward: bool = True,
          durations: Optional[Sequence[tuple[int, int]]] = None) -> Table:
    """The schedule in unit time slots (``durations``: whole slots (F, B) per stage, default 1 each):
    every action as early as its rank and its inputs allow."""
    starts, ends = _run(order(schedule, p, m, v, backward), p, v, durations or [(1, 1)] * (p * v))
    span = max(ends.values())
    out: Table = [[None] * span for _ in range(p)]
    for action, start in starts.items():
        length = ends[action] - start
        for t in range(start, start + length):
            out[action.stage % p][t] = action
    return out


def bubble(schedule: str, p: int, m: int, v: int = 1, backward: bool = True) -> Fraction:
    """Idle slots over all slots of the unit-slot table, counted."""
    slots = table(schedule, p, m, v, backward)
    idle = sum(1 for row in slots for cell in row if cell is None)
    return Fraction(idle, sum(len(row) for row in slots))


def makespan(schedule: str, forward: Sequence[float], m: int, backward: Optional[Sequence[float]] = None,
             v: int = 1) -> float:
    """The step's time: the last action's end when stage s takes ``forward[s]`` a micro-batch
    (and ``backward[s]``; None: a forward-only step), p = len(forward) / v ranks."""
    stages = len(forward)
    if stages % v:
        raise CostcalcError(f"{stages} stage durations for {v} chunks a rank: not a whole number of ranks")
    p = stages // v
    if backward is not None and len(backward) != stages:
        raise CostcalcError(f"{len(backward)} backward durations for {stages} stages")
    back = backward if backward is not None else [0] * stages
    _, ends = _run(order(schedule, p, m, v, backward is not None), p, v, list(zip(forward, back)))
    return _latest(list(ends.values()))


def forward_makespan(forward: Sequence[Any], m: int) -> Any:
    """``makespan(GPIPE, forward, m)`` of a forward-only step, over arrays of stage times (a search's
    batches: ``costcalc.steptimes``): the same list schedule in closed form. Every rank runs its m
    forwards in order, each once the previous stage's has ended, so stage s ends micro-batch i at
    e_s(i) = max(e_s(i - 1), e_{s-1}(i)) + d_s = (i + 1) d_s + max_{j <= i} (e_{s-1}(j) - j d_s)."""
    import numpy

    first = numpy.asarray(forward[0], dtype=float)
    i = numpy.arange(m).reshape((m,) + (1,) * first.ndim)
    ends = numpy.zeros((m,) + first.shape)
    for duration in forward:
        ends = (i + 1) * duration + numpy.maximum.accumulate(ends - i * duration, axis=0)
    return ends[-1]


def _latest(times: list) -> Any:
    """The latest of some times: numbers, or arrays of a search's batches (``costcalc.steptimes``), elementwise."""
    if any(hasattr(t, "shape") for t in times):
        import numpy

        latest = times[0]
        for t in times[1:]:
            latest = numpy.maximum(latest, t)
        return latest
    return max(times)


def _run(orders: list[list[Action]], p: int, v: int, durations: Sequence[tuple]) -> tuple[dict, dict]:
    """Start and end of every action: each rank runs its order, each action once its rank is free
    and what it needs has ended (list scheduling; an order that waits on itself is an error)."""
    last = p * v - 1
    starts: dict[Action, float] = {}
    ends: dict[Action, float] = {}
    free = [0] * p
    nxt = [0] * p
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for r in range(p):
            while nxt[r] < len(orders[r]):
                a = orders[r][nxt[r]]
                if a.kind == F:
                    needs = [Action(a.stage - 1, F, a.mb)] if a.stage else []
                else:
                    needs = [Action(a.stage, F, a.mb)] + ([Action(a.stage + 1, B, a.mb)] if a.stage < last else [])
                if any(n not in ends for n in needs):
                    break
                start = _latest([free[r]] + [ends[n] for n in needs])
                starts[a], ends[a] = start, start + durations[a.stage][a.kind == B]
                free[r] = ends[a]
                nxt[r] += 1
                left -= 1
                moved = True
        if not moved:
            raise CostcalcError("a pipeline order that waits on itself (deadlock)")
    return starts, ends


def _check(schedule: str, p: int, m: int, v: int) -> None:
    if schedule not in SCHEDULES:
        raise CostcalcError(f"pipeline schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    for name, value in (("stages", p), ("micro-batches", m), ("chunks a rank", v)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CostcalcError(f"a pipeline's {name} must be a positive integer, got {value!r}")
    if v > 1 and schedule != INTERLEAVED:
        raise CostcalcError(f"{schedule}: one model chunk a rank (v = 1); interleaved takes v > 1")
    if v == 1 and schedule == INTERLEAVED:
        raise CostcalcError("interleaved 1F1B runs v > 1 model chunks a rank (--virtual-stages); with one it is 1f1b")
    if schedule == INTERLEAVED and m % max(1, m // p):
        raise CostcalcError(f"interleaved 1F1B: {m} micro-batches are not a multiple of the rounds "
                            f"max(1, m // p) = {max(1, m // p)} (torch's ScheduleInterleaved1F1B's rule)")


def in_flight(schedule: str, p: int, m: int, v: int = 1, held: Optional[Sequence[float]] = None) -> list[float]:
    """Per rank, the most it holds at once of what a forward leaves for its backward, counted from the F+B
    unit-slot table: at each slot, over the micro-batches whose forward has started on one of the rank's
    stages and whose backward there has not yet ended, ``held[stage]`` each (default 1: the micro-batches
    in flight). 1F1B: stage s holds p - s; GPipe: m (tests/test_train_pipeline.py)."""
    weights = list(held) if held is not None else [1] * (p * v)
    if len(weights) != p * v:
        raise CostcalcError(f"{len(weights)} stage sizes for {p} ranks of {v} chunks")
    out = []
    for row in table(schedule, p, m, v, backward=True):
        started: set[tuple[int, int]] = set()
        done: set[tuple[int, int]] = set()
        most, last = 0, None
        for cell in row:
            if cell is not None and cell != last:          # an action's first slot (a longer one spans several)
                if cell.kind == F:
                    started.add((cell.stage, cell.mb))
            most = max(most, sum(weights[s] for s, i in started - done))
            if cell is not None and cell.kind == B:
                done.add((cell.stage, cell.mb))             # freed at its backward's end (unit slots: this slot)
            last = cell
        out.append(most)
    return out
