"""Device profiles: one JSON file per device in ``presets/devices/``, with its datasheet source.

A profile has ``name``, ``title``, ``peak_flops`` (dense -- not "with sparsity" -- FLOP/s
per compute dtype: ``bf16``, ``fp16``, ``fp8``, ``int8``, ...), ``mem_bw`` (bytes/s),
``mem_bytes`` (bytes: what the device exposes to the driver -- nvidia-smi's or rocm-smi's total,
not the datasheet's decimal "80GB"; ``source.memory_note`` and ``source.memory_url`` say where each
figure was read, and say so where only the marketing figure was found) and ``source`` (where the numbers
come from); optionally ``interconnect``: ``scale_up`` (the GPU-to-GPU link inside one node or
NVLink domain: ``bytes_per_s_each_way`` per GPU, ``domain_gpus``, ``topology`` switch|mesh,
``latency_s``, ``url``, ``note``; optionally ``all_reduce``, the algorithm an all-reduce runs by
default -- ``ring`` unless given, ``in_network`` where the switch reduces -- with ``all_reduce_note``
saying where that comes from), ``scale_out`` (the NIC per GPU: ``bytes_per_s_each_way``,
``latency_s``, ``url``, ``note``) and a free ``note``. Every rate is ONE direction.

Old profiles stored ``nvlink_bytes_per_s`` (a bidirectional total), ``pcie_bytes_per_s``,
``infinity_fabric_bytes_per_s`` and their notes: they are still read, kept as written and never
used -- such a device has no links, and a layout over several devices refuses it naming the new
fields (``Device.link``). ``--device-file`` reads one of your own (``costcalc
verify --save-profile`` writes one from measurements).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from . import jsonfile, printable
from .collectives import ALGORITHMS, MESH, RING, SWITCH, TOPOLOGIES, Link
from .errors import CostcalcError, quote
from .spec import check_name

KEYS = ("name", "title", "peak_flops", "mem_bw", "mem_bytes", "interconnect", "source")


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: Mapping[str, float]    # dense FLOP/s by compute dtype
    mem_bw: float                      # bytes/s
    mem_bytes: int
    title: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)
    interconnect: Mapping[str, Any] = field(default_factory=dict)
    scale_up: Link | None = None       # from interconnect.scale_up (per GPU, each way)
    scale_out: Link | None = None      # from interconnect.scale_out (the NIC per GPU, each way)

    def link(self, kind: str) -> Link:
        """``scale_up`` or ``scale_out``; a device without it is refused in one line."""
        found = {"scale_up": self.scale_up, "scale_out": self.scale_out}[kind]
        if found is None:
            old = [k for k in LEGACY if k.endswith("_bytes_per_s") and self.interconnect.get(k) is not None]
            raise CostcalcError(f"device {self.name}: no interconnect.{kind} ({', '.join(LINK_KEYS[kind])}), which "
                                f"a layout over several devices needs" + (f"; {', '.join(old)} (old, ambiguous: "
                                "a bidirectional total) is not read" if old else ""))
        return found

    def peak(self, dtype: str) -> float:
        if dtype not in self.peak_flops:
            raise CostcalcError(f"device {self.name}: no {dtype} peak (it has {quote(', '.join(self.peak_flops))})")
        return self.peak_flops[dtype]

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "title": self.title, "peak_flops": dict(self.peak_flops), "mem_bw": self.mem_bw,
               "mem_bytes": self.mem_bytes}
        if self.interconnect:
            out["interconnect"] = dict(self.interconnect)
        out["source"] = dict(self.source)
        return out


def _root():
    try:
        return resources.files("costcalc.preset_data").joinpath("devices")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "presets" / "devices"


def names() -> list[str]:
    return jsonfile.names(_root())


def load(name: str) -> Device:
    """A built-in device by name; an unknown name suggests the nearest ones."""
    return from_dict(jsonfile.built_in(_root(), name, "device", "costcalc devices"), repr(name))


def load_file(path: str | Path) -> Device:
    return from_dict(jsonfile.read(path, "device file"), repr(str(path)))


def load_all() -> list[Device]:
    return [load(n) for n in names()]


def from_dict(data: Any, origin: str) -> Device:
    """Validate a profile; every error names the file and the field."""
    if not isinstance(data, dict):
        raise CostcalcError(f"device {origin}: expected a JSON object, got {jsonfile.kind(data)}")
    for key in data:
        if key not in KEYS:
            raise CostcalcError(f"device {origin}: unknown field {quote(key)}")
    printable.check_all(f"device {origin}", data)   # a title or a dtype is shown as written: no control characters
    if not isinstance(data.get("title", ""), str):
        raise CostcalcError(f"device {origin}: field 'title' must be a string")
    for key in ("name", "peak_flops", "mem_bw", "mem_bytes"):
        if key not in data:
            raise CostcalcError(f"device {origin}: missing field {quote(key)}")
    name = check_name(data["name"], f"device {origin}: field 'name'")
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise CostcalcError(f"device {origin}: field 'peak_flops' must map dtypes to FLOP/s")
    for dtype, value in peaks.items():
        _rate(origin, f"peak_flops.{dtype}", value, PEAK_RANGE, "FLOP/s")
    mem_bw = _rate(origin, "mem_bw", data["mem_bw"], BANDWIDTH_RANGE, "bytes/s")
    mem_bytes = _rate(origin, "mem_bytes", data["mem_bytes"], (1, 1e18), "bytes")
    if mem_bytes != int(mem_bytes):
        raise CostcalcError(f"device {origin}: field 'mem_bytes' must be a whole number of bytes, got {quote(mem_bytes)}")
    mem_bytes = int(mem_bytes)
    for key in ("source", "interconnect"):
        if not isinstance(data.get(key, {}), dict):
            raise CostcalcError(f"device {origin}: field {quote(key)} must be an object")
    interconnect = data.get("interconnect", {})
    links = _links(origin, interconnect)
    return Device(name, dict(peaks), mem_bw, mem_bytes, data.get("title", ""), data.get("source", {}),
                  interconnect, links.get("scale_up"), links.get("scale_out"))


# The link classes of ``interconnect`` and their fields (all required); ``link`` names the hardware.
LINK_KEYS = {"scale_up": ("bytes_per_s_each_way", "domain_gpus", "topology", "latency_s", "url", "note"),
             "scale_out": ("bytes_per_s_each_way", "latency_s", "url", "note")}
LINK_OPTIONAL = ("link",)
# scale_up only: the all-reduce's default algorithm and its source (both or neither)
ALL_REDUCE_KEYS = ("all_reduce", "all_reduce_note")
# Old interconnect fields (the built-in profiles before per-direction figures): read, kept, never used.
LEGACY = ("nvlink_bytes_per_s", "nvlink_note", "pcie_bytes_per_s", "pcie_note", "infinity_fabric_bytes_per_s")
LATENCY_RANGE = (0, 1)            # seconds: a collective's fixed latency
DOMAIN_RANGE = (1, 1_000_000)     # GPUs in one scale-up domain


def _links(origin: str, interconnect: dict) -> dict[str, Link]:
    for key in interconnect:
        if key not in (*LINK_KEYS, "note", *LEGACY):
            raise CostcalcError(f"device {origin}: unknown field {quote('interconnect.' + key)} (expected "
                                f"{', '.join(LINK_KEYS)}, note)")
    if not isinstance(interconnect.get("note", ""), str):
        raise CostcalcError(f"device {origin}: field 'interconnect.note' must be a string")
    links = {}
    for kind, keys in LINK_KEYS.items():
        if kind not in interconnect:
            continue
        data, where = interconnect[kind], f"interconnect.{kind}"
        if not isinstance(data, dict):
            raise CostcalcError(f"device {origin}: field {quote(where)} must be an object")
        optional = LINK_OPTIONAL + (ALL_REDUCE_KEYS if kind == "scale_up" else ())
        for key in data:
            if key not in keys + optional:
                raise CostcalcError(f"device {origin}: unknown field {quote(where + '.' + key)}")
        for key in keys:
            if key not in data:
                raise CostcalcError(f"device {origin}: missing field {quote(where + '.' + key)}")
        for key in ("url", "note", *optional):
            if not isinstance(data.get(key, ""), str):
                raise CostcalcError(f"device {origin}: field {quote(where + '.' + key)} must be a string")
        rate = _rate(origin, f"{where}.bytes_per_s_each_way", data["bytes_per_s_each_way"], BANDWIDTH_RANGE, "bytes/s")
        latency = _rate(origin, f"{where}.latency_s", data["latency_s"], LATENCY_RANGE, "seconds")
        domain, topology, all_reduce = None, SWITCH, data.get("all_reduce", RING)
        if kind == "scale_up":
            if all_reduce not in ALGORITHMS:
                raise CostcalcError(f"device {origin}: field {quote(where + '.all_reduce')} must be one of "
                                    f"{', '.join(ALGORITHMS)}, got {quote(all_reduce)}")
            if ("all_reduce" in data) != ("all_reduce_note" in data):
                raise CostcalcError(f"device {origin}: fields {quote(where + '.all_reduce')} and "
                                    f"{quote(where + '.all_reduce_note')} (its source) go together")
            domain = _rate(origin, f"{where}.domain_gpus", data["domain_gpus"], DOMAIN_RANGE, "GPUs")
            if domain != int(domain):
                raise CostcalcError(f"device {origin}: field {quote(where + '.domain_gpus')} must be a whole number "
                                    f"of GPUs, got {quote(domain)}")
            domain, topology = int(domain), data["topology"]
            if topology not in TOPOLOGIES:
                raise CostcalcError(f"device {origin}: field {quote(where + '.topology')} must be one of "
                                    f"{', '.join(TOPOLOGIES)}, got {quote(topology)}")
            if topology == MESH and domain < 2:
                raise CostcalcError(f"device {origin}: a mesh ({where}.topology) joins at least 2 GPUs")
        links[kind] = Link(data.get("link", kind), rate, latency, domain, topology, all_reduce)
    return links


# What a device can be, from a microcontroller to far past any accelerator: a profile outside these
# is a typo (a missing "e12"), and times computed on it would be noise or overflow.
PEAK_RANGE = (1e6, 1e21)        # FLOP/s
BANDWIDTH_RANGE = (1e3, 1e18)   # bytes/s


def _rate(origin: str, key: str, value: Any, bounds: tuple[float, float], unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CostcalcError(f"device {origin}: field {quote(key)} must be a number of {unit}, got {quote(value)}")
    if not bounds[0] <= value <= bounds[1]:   # NaN and infinity fail too
        raise CostcalcError(f"device {origin}: field {quote(key)} must be between {bounds[0]:g} and {bounds[1]:g} "
                            f"{unit}, got {quote(value)}")
    return value
