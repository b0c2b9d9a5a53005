"""A model's shape, validated: the values of the model symbols for one preset.

A preset file is a flat JSON object whose size keys are the symbol names of
``costcalc.symbols`` (``L``, ``d``, ``h_q``, ...), plus ``name``, ``arch``, ``title``
and ``source`` (where the numbers came from).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import vocab
from .errors import CostcalcError
from .vocab import ARCHS

COMMON_KEYS = ("L", "d", "h_q", "h_kv", "d_h", "V")
ARCH_KEYS = {"dense": ("m",), "moe": ("E", "k", "m_e")}
META_KEYS = ("name", "arch", "title", "source")
SIZE_KEYS = COMMON_KEYS + ("m", "E", "k", "m_e")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str
    sizes: Mapping[str, int]
    title: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> int:
        return self.sizes[key]

    @property
    def d_q(self) -> int:
        return self.sizes["h_q"] * self.sizes["d_h"]

    @property
    def d_kv(self) -> int:
        return self.sizes["h_kv"] * self.sizes["d_h"]

    def numbers(self) -> dict[str, int]:
        """Model sizes and the derived d_q, d_kv, by symbol name (no sympy)."""
        return {**self.sizes, **vocab.derived(self.sizes)}

    def values(self) -> dict:
        """Model symbols (and the derived d_q, d_kv) bound to this model's sizes."""
        from .symbols import BY_NAME

        return {BY_NAME[name]: value for name, value in self.numbers().items()}

    def with_sizes(self, **changes: int) -> "ModelSpec":
        """A copy with some sizes changed (validated again)."""
        data = {**self.to_dict(), **changes}
        return from_dict(data, origin=f"{self.name} (modified)")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "arch": self.arch}
        if self.title:
            out["title"] = self.title
        out.update(self.sizes)
        if self.source:
            out["source"] = dict(self.source)
        return out


def from_dict(data: Any, origin: str) -> ModelSpec:
    """Validate a preset mapping; every error names the preset (``origin``) and the field."""
    if not isinstance(data, dict):
        raise CostcalcError(f"preset {origin}: expected a JSON object, got {type(data).__name__}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise CostcalcError(f"preset {origin}: field 'name' is missing or not a string")
    arch = data.get("arch")
    if arch not in ARCHS:
        raise CostcalcError(f"preset {origin}: field 'arch' must be one of {', '.join(ARCHS)}, got {arch!r}")
    wanted = COMMON_KEYS + ARCH_KEYS[arch]
    for key in data:
        if key not in META_KEYS and key not in wanted:
            hint = f" (only for arch {'moe' if arch == 'dense' else 'dense'})" if key in SIZE_KEYS else ""
            raise CostcalcError(f"preset {origin}: unknown field {key!r}{hint}")
    sizes = {}
    for key in wanted:
        if key not in data:
            raise CostcalcError(f"preset {origin}: missing field {key!r} ({_meaning(key)})")
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CostcalcError(f"preset {origin}: field {key!r} must be a positive integer, got {value!r}")
        sizes[key] = value
    if sizes["h_q"] % sizes["h_kv"]:
        raise CostcalcError(f"preset {origin}: h_q={sizes['h_q']} is not divisible by h_kv={sizes['h_kv']}")
    if arch == "moe" and sizes["k"] > sizes["E"]:
        raise CostcalcError(f"preset {origin}: k={sizes['k']} experts per token exceeds E={sizes['E']} experts")
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise CostcalcError(f"preset {origin}: field 'source' must be an object")
    title = data.get("title", "")
    if not isinstance(title, str):
        raise CostcalcError(f"preset {origin}: field 'title' must be a string")
    return ModelSpec(name=name, arch=arch, sizes=sizes, title=title, source=source)


def _meaning(key: str) -> str:
    return vocab.meaning(key)
