"""Device profiles: one JSON file per device in ``presets/devices/``, with its datasheet source.

A profile has ``name``, ``title``, ``peak_flops`` (dense -- not "with sparsity" -- FLOP/s
per compute dtype: ``bf16``, ``fp16``, ``fp8``, ``int8``, ...), ``mem_bw`` (bytes/s),
``mem_bytes`` (bytes, as the vendor states them, decimal) and ``source`` (where the numbers
come from); optionally ``interconnect``. ``--device-file`` reads one of your own (``costcalc
verify --save-profile`` writes one from measurements).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from . import jsonfile
from .errors import CostcalcError
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

    def peak(self, dtype: str) -> float:
        if dtype not in self.peak_flops:
            raise CostcalcError(f"device {self.name}: no {dtype} peak (it has {', '.join(self.peak_flops)})")
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


def _files() -> dict:
    return {p.name[:-5]: p for p in _root().iterdir() if p.name.endswith(".json")}


def names() -> list[str]:
    return sorted(_files())


def load(name: str) -> Device:
    """A built-in device by name; an unknown name suggests the nearest ones."""
    files = _files()
    if name not in files:
        near = difflib.get_close_matches(name, list(files), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; see 'costcalc devices' ({len(files)} built in)"
        raise CostcalcError(f"unknown device {name!r}{hint}")
    return from_dict(jsonfile.read(files[name], f"device {name!r}"), repr(name))


def load_file(path: str | Path) -> Device:
    return from_dict(jsonfile.read(path, "device file"), repr(str(path)))


def load_all() -> list[Device]:
    return [load(n) for n in names()]


def from_dict(data: Any, origin: str) -> Device:
    """Validate a profile; every error names the file and the field."""
    if not isinstance(data, dict):
        raise CostcalcError(f"device {origin}: expected a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in KEYS:
            raise CostcalcError(f"device {origin}: unknown field {key!r}")
    for key in ("name", "peak_flops", "mem_bw", "mem_bytes"):
        if key not in data:
            raise CostcalcError(f"device {origin}: missing field {key!r}")
    name = check_name(data["name"], f"device {origin}: field 'name'")
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise CostcalcError(f"device {origin}: field 'peak_flops' must map dtypes to FLOP/s")
    for dtype, value in peaks.items():
        _positive(origin, f"peak_flops.{dtype}", value)
    mem_bw = _positive(origin, "mem_bw", data["mem_bw"])
    mem_bytes = _positive(origin, "mem_bytes", data["mem_bytes"])
    if not isinstance(mem_bytes, int):
        raise CostcalcError(f"device {origin}: field 'mem_bytes' must be a whole number of bytes")
    for key in ("source", "interconnect"):
        if not isinstance(data.get(key, {}), dict):
            raise CostcalcError(f"device {origin}: field {key!r} must be an object")
    return Device(name, dict(peaks), mem_bw, mem_bytes, str(data.get("title", "")), data.get("source", {}),
                  data.get("interconnect", {}))


def _positive(origin: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise CostcalcError(f"device {origin}: field {key!r} must be a positive number, got {value!r}")
    return value
