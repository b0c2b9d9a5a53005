"""Collectives as data and pure functions: ``time = alpha + factor(n) * S / B``.

Bytes convention (nccl-tests, doc/PERFORMANCE.md): ``S`` is the whole array of one rank -- the
buffer an all-reduce reduces, the gathered output of an all-gather, the input of a reduce-scatter,
the whole send buffer of an all-to-all, the message of a send/recv. ``factor(n) * S`` is what each
rank sends (and receives) over its link, each way, in the bandwidth-optimal ring algorithm: nccl-tests'
"bus bandwidth" correction. ``B`` is the per-direction bandwidth of one GPU on the link class the
group spans (``link_for``): inside one scale-up domain its NVLink / Infinity Fabric / PCIe link,
across domains the slowest hop -- the scale-out NIC. ``alpha`` is the fixed latency of one collective,
a parameter (the device profile's ``latency_s`` of that link class by default). An all-reduce runs the
link's ``all_reduce`` algorithm unless one is given: the ring, or ``in_network`` where the switch reduces
(NVLink SHARP, NCCL's NVLS), factor 1 (docs/cost-model.md, "Collectives", says why).

No device, no CLI here: the layout code passes numbers in. Factors are exact ``Fraction`` values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from fractions import Fraction
from typing import Any, Callable, Optional

from .errors import CostcalcError, quote

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, SEND_RECV = (
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
RING, IN_NETWORK = "ring", "in_network"   # all-reduce algorithms: the ring, or reduced in the switch (NVLS/SHARP)


@dataclass(frozen=True)
class Op:
    name: str
    factor: Callable[[int], Fraction]    # n ranks (n >= 2) -> bytes each rank moves each way, per byte of S
    rule: str                            # the factor as printed in docs/cost-model.md


OPS = {op.name: op for op in (
    Op(ALL_REDUCE, lambda n: Fraction(2 * (n - 1), n), "2(n-1)/n"),
    Op(REDUCE_SCATTER, lambda n: Fraction(n - 1, n), "(n-1)/n"),
    Op(ALL_GATHER, lambda n: Fraction(n - 1, n), "(n-1)/n"),
    Op(ALL_TO_ALL, lambda n: Fraction(n - 1, n), "(n-1)/n"),
    Op(SEND_RECV, lambda n: Fraction(1), "1"),
)}
# The all-reduce factor when the switch reduces (NVLink SHARP, NCCL's NVLS: a reduce-scatter by multimem
# loads the switch reduces, then an all-gather by multimem stores the switch replicates): each rank sends
# each byte of its S once and receives each byte of the result once -- 1, for any n >= 2. A profile's
# scale-up link names it as its default (``Link.all_reduce``) where its NCCL runs NVLS (docs/cost-model.md).
IN_NETWORK_RULE = "1"
ALGORITHMS = (RING, IN_NETWORK)
SWITCH, MESH = "switch", "mesh"
TOPOLOGIES = (SWITCH, MESH)


@dataclass(frozen=True)
class Link:
    """One link class of a device, per GPU: ``bytes_per_s_each_way`` (one direction; the
    datasheets' "bidirectional" totals are twice it), ``latency_s`` (alpha), ``domain`` (how many
    GPUs one scale-up domain joins; ``None`` for the scale-out network) and ``topology``: ``switch``
    (every GPU reaches every other at its full bandwidth) or ``mesh`` (a direct link to each of the
    ``domain - 1`` others, ``bytes_per_s_each_way`` their sum: a group of n uses n - 1 of them);
    ``all_reduce``: the algorithm an all-reduce over this link runs unless told (``ring`` or
    ``in_network``)."""
    name: str
    bytes_per_s_each_way: float
    latency_s: float
    domain: Optional[int] = None
    topology: str = SWITCH
    all_reduce: str = RING

    def bandwidth(self, n: int) -> float:
        """The per-direction bandwidth a group of ``n`` ranks inside this link class gets per GPU."""
        _ranks(n)
        if self.topology == MESH and self.domain and self.domain > 1:
            return self.bytes_per_s_each_way * min(n - 1, self.domain - 1) / (self.domain - 1)
        return self.bytes_per_s_each_way


def factor(op: str, n: int, algorithm: str = RING) -> Fraction:
    """Bytes each of ``n`` ranks moves each way per byte of ``S``; 0 for one rank."""
    chosen = _op(op)
    _ranks(n)
    if algorithm not in ALGORITHMS:
        raise CostcalcError(f"collective algorithm {quote(algorithm)}: expected one of {', '.join(ALGORITHMS)}")
    if algorithm == IN_NETWORK and op != ALL_REDUCE:
        raise CostcalcError(f"collective {op}: the in-network algorithm is an all-reduce's only")
    if n == 1:
        return Fraction(0)
    return Fraction(1) if algorithm == IN_NETWORK else chosen.factor(n)


def link_bytes(op: str, n: int, size: int | Fraction, algorithm: str = RING) -> Fraction:
    """``factor(n) * S``: the bytes each rank sends (and receives) over its link, each way."""
    return factor(op, n, algorithm) * _size(size)


def link_for(n: int, scale_up: Optional[Link], scale_out: Optional[Link], within: bool = True) -> Link:
    """The link class a group of ``n`` ranks spans: the scale-up link while the group fits one
    domain (``n <= domain``, and ``within`` -- the group is placed inside one domain), else the
    slowest hop: the lower bandwidth of the two (the NIC), with the higher latency and the ring (no
    profile here says the network reduces)."""
    _ranks(n)
    if scale_up is not None and within and (scale_up.domain is None or n <= scale_up.domain):
        return scale_up
    if scale_out is None:
        where = "one scale-up domain" if scale_up is None else f"a scale-up domain of {scale_up.domain}"
        raise CostcalcError(f"a group of {n} ranks spans more than {where}, and the device has no "
                            "interconnect.scale_out (bytes_per_s_each_way, latency_s)")
    if scale_up is None:
        return scale_out
    slow = min((scale_up, scale_out), key=lambda link: link.bandwidth(min(n, scale_up.domain or n)))
    return Link(f"{scale_out.name} (across domains)", slow.bandwidth(min(n, scale_up.domain or n)),
                max(scale_up.latency_s, scale_out.latency_s))


def algorithm_on(op: str, link: Link) -> str:
    """The algorithm ``op`` runs over ``link`` by default: an all-reduce the link's ``all_reduce``,
    anything else the ring."""
    return link.all_reduce if op == ALL_REDUCE else RING


def time(op: str, n: int, size: int | Fraction, link: Link, alpha: Optional[float] = None,
         algorithm: Optional[str] = None) -> float:
    """Seconds of one collective: ``alpha + factor(n) * S / B``, B = ``link.bandwidth(n)``; alpha is
    ``link.latency_s`` and the algorithm ``algorithm_on(op, link)`` unless given. One rank moves nothing
    and takes no time."""
    moved = link_bytes(op, n, size, algorithm_on(_op(op).name, link) if algorithm is None else algorithm)
    latency = link.latency_s if alpha is None else _seconds(alpha)
    if n == 1:
        return 0.0
    return latency + float(moved) / _bandwidth(link, n)


def times(op: str, n: int, sizes: Any, link: Link) -> Any:
    """``time`` of the same collective at an array of message sizes (whole bytes; a search's batches):
    ``alpha + factor(n) * S / B`` in floating point (``time`` takes the product exactly first)."""
    if n == 1:
        return 0.0 * sizes
    latency, per_byte = _coefficients(op, n, link)
    return latency + per_byte * sizes


@lru_cache(maxsize=1024)
def _coefficients(op: str, n: int, link: Link) -> tuple[float, float]:
    """``times``' alpha and seconds a byte of message, ``factor(n) / B``."""
    return link.latency_s, float(factor(op, n, algorithm_on(_op(op).name, link))) / _bandwidth(link, n)


def _bandwidth(link: Link, n: int) -> float:
    bandwidth = link.bandwidth(n)
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not 0 < bandwidth < math.inf:
        raise CostcalcError(f"link {link.name}: bandwidth must be a positive number of bytes/s, got {quote(bandwidth)}")
    return bandwidth


def _op(op: str) -> Op:
    if op not in OPS:
        raise CostcalcError(f"unknown collective {quote(op)}; expected one of {', '.join(OPS)}")
    return OPS[op]


def _ranks(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise CostcalcError(f"a collective's ranks must be a whole number >= 1, got {quote(n)}")
    return n


def _size(size: int | Fraction) -> Fraction:
    if isinstance(size, bool) or not isinstance(size, (int, Fraction)) or size < 0:
        raise CostcalcError(f"a collective's size must be a whole or exact number of bytes >= 0, got {quote(size)}")
    return Fraction(size)


def _seconds(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise CostcalcError(f"a collective's alpha must be a number of seconds >= 0, got {quote(value)}")
    return value
