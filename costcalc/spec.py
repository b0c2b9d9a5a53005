"""A model's shape, validated: its layer groups and the values of their size symbols.

A preset file is a flat JSON object whose size keys are the symbol names of
``costcalc.vocab`` (``L``, ``d``, ``h_q``, ...), plus ``name``, ``title`` and ``source``
(where the numbers came from). A uniform model names its block kind in ``arch``
(``dense``, ``moe``, or any ``costcalc.blocks`` key such as ``window.dense``) and its
depth in ``L``. A model whose layers differ lists ``layers``: groups of ``count``
identical layers, each with its ``arch`` and the sizes it sets for itself (the rest come
from the top level). The order of the groups does not change any FLOPs count.

Optional: ``tied_embeddings`` (the LM head shares the embedding matrix), ``stated``
(the parameter counts the publisher states, checked by the tests), ``mtp``: the model's
multi-token-prediction modules (DeepSeek-V3's ``num_nextn_predict_layers``), ``{"count": n}``,
each the block of the last layer group with its sizes unless the object gives its own ``arch``
and sizes as a group does; they are not decoder layers (``L`` leaves them out), counted apart
(``mtp_params``) and run only by a decode step's draft (``--draft mtp``); and ``dtypes``: the
weight format each module ships in (``costcalc.weights``: ``{"default": "fp8-block128", "router": "bf16"}``;
a key is ``default``, a term, an operator, ``lm_head`` or ``embedding``; absent: bf16).

Limits, checked before any work: every size at most ``MAX_SIZE`` (2^40, as lengths and batches),
at most ``MAX_LAYERS`` layers and ``MAX_GROUPS`` groups, no control character in any text. At
these limits every count stays an exact integer far from a float's range (the largest, a
training step at 2^40 tokens x 2^40 sequences, is below 2^300), so tables and units never overflow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from . import blocks, jsonfile, printable, vocab
from .errors import CostcalcError, quote
from .vocab import ARCHS

MAX_SIZE = 2**40        # any one size (d, V, a head count, an expert width ...): larger is a typo
MAX_LAYERS = 2**16      # layers in a model (L, a group's count, their sum): published models have a few hundred
MAX_GROUPS = 1024       # layer groups in a preset or a config's distinct layer kinds, checked before any work
META_KEYS = ("name", "arch", "title", "source", "layers", "tied_embeddings", "stated", "state_dtype", "mtp",
             "dtypes")
SIZE_KEYS = tuple(n.name for n in vocab.MODEL)
MODEL_KEYS = ("d", "V")          # one value for the whole model


@dataclass(frozen=True)
class Group:
    """``count`` identical layers of one block kind with their sizes."""
    count: int
    block: blocks.Block
    sizes: Mapping[str, int]     # d, V and every size the block uses

    @property
    def arch(self) -> str:
        return self.block.key

    def numbers(self) -> dict[str, int]:
        """Symbol values for this group's formulas: its sizes, L = its layer count, d_q, d_kv; a short
        convolution's channels d_c (the model width d unless a layout's ``shard`` gave its d / tp)."""
        out = {**self.sizes, "L": self.count}
        if self.block.mixer == "shortconv":
            out.setdefault("d_c", out["d"])
        return {**out, **vocab.derived(out)}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str                    # the block key of a uniform model; "hybrid" when groups differ
    sizes: Mapping[str, int]     # the top-level sizes (with L, the total depth)
    title: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[Group, ...] = ()
    tied_embeddings: bool = False
    stated: Mapping[str, Any] = field(default_factory=dict)
    state_dtype: str = ""        # the dtype its mixers keep their recurrent state in ("": the KV dtype)
    mtp: Optional[Group] = None  # its multi-token-prediction modules (count, an ``mtp`` block, sizes), or none
    dtypes: Mapping[str, str] = field(default_factory=dict)   # weight format by module (costcalc.weights)
    dtypes_from: str = "preset"  # where ``dtypes`` came from: preset | quantization_config (not written out)

    def __getitem__(self, key: str) -> int:
        return self.sizes[key]

    @property
    def uniform(self) -> bool:
        return len(self.groups) == 1

    @property
    def d_q(self) -> int:
        return vocab.derived(self.sizes)["d_q"]

    @property
    def d_kv(self) -> int:
        return vocab.derived(self.sizes)["d_kv"]

    def numbers(self) -> dict[str, int]:
        """Sizes and the derived d_q, d_kv by symbol name (a uniform model's one group)."""
        if not self.uniform:
            raise CostcalcError(f"{self.name} has {len(self.groups)} layer groups; evaluate per group")
        return self.groups[0].numbers()

    def values(self) -> dict:
        """Model symbols (and the derived d_q, d_kv) bound to a uniform model's sizes."""
        from .symbols import BY_NAME

        return {BY_NAME[name]: value for name, value in self.numbers().items()}

    @property
    def has_mla(self) -> bool:
        return any(g.block.attention == "mla" for g in self.groups)

    @property
    def has_mixers(self) -> bool:
        """Whether some layer runs a linear-attention or state-space mixer."""
        return any(g.block.mixer for g in self.groups)

    @property
    def has_states(self) -> bool:
        """Whether some layer keeps a recurrent state (its bytes in ``state_dtype``)."""
        return any(g.block.stateful for g in self.groups)

    @property
    def windows(self) -> list[int]:
        return sorted({g.sizes["W"] for g in self.groups if g.block.attention == "window"})

    def with_sizes(self, **changes: int) -> "ModelSpec":
        """A copy with some top-level sizes changed (validated again). ``L`` keeps that many of
        the model's layers (more is an error), taken round-robin from its groups."""
        data = self.to_dict()
        if "L" in changes and changes["L"] > self.sizes["L"]:
            raise CostcalcError(f"{self.name} has {self.sizes['L']} layers; cannot keep {changes['L']}")
        if "L" in changes and "layers" in data:
            data["layers"] = _take(data["layers"], changes.pop("L"))
        data.update(changes)
        return from_dict(data, origin=f"preset {self.name} (modified)")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.title:
            out["title"] = self.title
        if self.uniform and self.arch in ("dense", "moe", self.groups[0].arch):
            out["arch"] = self.arch
            out.update(self.sizes)
        else:
            top = {k: v for k, v in self.sizes.items() if k != "L"}
            out.update(top)
            out["layers"] = [{"count": g.count, "arch": g.arch,
                              **{k: v for k, v in g.sizes.items() if top.get(k) != v}} for g in self.groups]
        if self.tied_embeddings:
            out["tied_embeddings"] = True
        if self.stated:
            out["stated"] = dict(self.stated)
        if self.state_dtype:
            out["state_dtype"] = self.state_dtype
        if self.mtp is not None:
            last = self.groups[-1]
            arch = self.mtp.block.key.removeprefix("mtp:")
            if arch == last.arch and dict(self.mtp.sizes) == dict(last.sizes):
                out["mtp"] = {"count": self.mtp.count}
            else:   # its own block: its sizes come from the top level unless given (``_mtp``)
                own = {k: v for k, v in self.mtp.sizes.items() if k not in MODEL_KEYS and self.sizes.get(k) != v}
                out["mtp"] = {"count": self.mtp.count, "arch": arch, **own}
        if self.dtypes:
            out["dtypes"] = dict(self.dtypes)
        if self.source:
            out["source"] = dict(self.source)
        return out


def _take(layers: list[dict], n: int) -> list[dict]:
    counts = [0] * len(layers)
    left = n
    while left > 0 and any(c < g["count"] for c, g in zip(counts, layers)):
        for i, g in enumerate(layers):
            if left and counts[i] < g["count"]:
                counts[i] += 1
                left -= 1
    if n < 1:
        raise CostcalcError(f"layers must be a positive integer, got {n}")
    return [{**g, "count": c} for g, c in zip(layers, counts) if c]


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")   # the whole name: fullmatch (``$`` passes a final newline)


def check_name(name: Any, where: str) -> str:
    """A preset name: letters, digits, ``.``, ``_``, ``-``, not starting with a dot or dash
    (it is also a file name: no folders, nothing hidden)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > 100:
        raise CostcalcError(f"{where}: {quote(name)} is not a preset name (letters, digits, '.', '_' and '-', "
                            f"starting with a letter or digit, at most 100 characters)")
    return name


def _positive(origin: str, key: str, value: Any, most: int = MAX_SIZE) -> int:
    """A positive integer of at most ``most`` (``MAX_SIZE``; ``MAX_LAYERS`` for a layer count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CostcalcError(f"{origin}: field {quote(key)} must be a positive integer, got {quote(value)}")
    if value > most:
        raise CostcalcError(f"{origin}: field {quote(key)} is too large (at most {most:,}), got {quote(value)}")
    return value


def _block(origin: str, where: str, fields: dict) -> blocks.Block:
    """The block kind ``fields['arch']`` names (``where``: the group, or "" for the top level)."""
    if "arch" not in fields:
        raise CostcalcError(f"{origin}: {where}missing field 'arch'")
    try:
        block = blocks.parse_arch(fields["arch"])
    except ValueError as exc:
        raise CostcalcError(f"{origin}: {where}field 'arch' {exc}") from None
    if block.mtp and where != "mtp: ":
        raise CostcalcError(f"{origin}: {where}field 'arch' {quote(fields['arch'])}: a multi-token-prediction "
                            f"module is the model's 'mtp' field, not a decoder layer")
    return block


def _check_group(origin: str, where: str, block: blocks.Block, sizes: dict[str, int]) -> None:
    for key in MODEL_KEYS + block.sizes():
        if key not in sizes:
            raise CostcalcError(f"{origin}: {where}missing field {quote(key)} ({vocab.meaning(key)})")
    if "h_kv" in block.sizes() and sizes["h_q"] % sizes["h_kv"]:
        raise CostcalcError(f"{origin}: {where}h_q={sizes['h_q']} is not divisible by h_kv={sizes['h_kv']}")
    for heads, per in (("h_lv", "h_lk"), ("h_m", "G")):
        if per in block.sizes() and heads in block.sizes() and sizes[heads] % sizes[per]:
            raise CostcalcError(f"{origin}: {where}{heads}={sizes[heads]} is not divisible by {per}={sizes[per]}")
    if block.ffn == "moe" and sizes["k"] > sizes["E"]:
        raise CostcalcError(f"{origin}: {where}k={sizes['k']} experts per token exceeds E={sizes['E']} experts")


def from_dict(data: Any, origin: str) -> ModelSpec:
    """Validate a preset mapping; every error names its source (``origin``: "preset 'x'",
    "preset file '...'", "config '...'") and the field."""
    if not isinstance(data, dict):
        raise CostcalcError(f"{origin}: expected a JSON object, got {jsonfile.kind(data)}")
    if "name" not in data:
        raise CostcalcError(f"{origin}: missing field 'name'")
    name = check_name(data["name"], f"{origin}: field 'name'")
    printable.check_all(origin, data)       # a title (or any text) is shown as written: no control characters
    for key in data:
        if key not in META_KEYS and key not in SIZE_KEYS:
            raise CostcalcError(f"{origin}: unknown field {quote(key)}")
    top = {key: _positive(origin, key, data[key], MAX_LAYERS if key == "L" else MAX_SIZE)
           for key in SIZE_KEYS if key in data}
    if "layers" in data:
        for key in ("arch", "L"):
            if key in data:
                raise CostcalcError(f"{origin}: field {quote(key)} conflicts with 'layers' (give it per group)")
        groups = _groups(origin, data["layers"], top)
        kinds = {g.arch for g in groups}
        arch = kinds.pop() if len(kinds) == 1 else "hybrid"
        used = {k for g in groups for k in MODEL_KEYS + g.block.sizes()}
    else:
        if "arch" not in data:
            raise CostcalcError(f"{origin}: missing field 'arch' (the block kind: {', '.join(ARCHS)} "
                                f"or ATTENTION.FFN like window.dense), or 'layers'")
        arch = data["arch"]
        block = _block(origin, "", data)
        if "L" not in top:
            raise CostcalcError(f"{origin}: missing field 'L' ({vocab.meaning('L')})")
        _check_group(origin, "", block, top)
        groups = (Group(top["L"], block, {k: top[k] for k in MODEL_KEYS + block.sizes()}),)
        used = set(MODEL_KEYS + block.sizes()) | {"L"}
    for key in top:
        if key not in used and key != "L":
            hint = ""
            if arch in ("dense", "moe") and key in ("m", "E", "k", "m_e"):
                hint = f" (only for arch {'moe' if arch == 'dense' else 'dense'})"
            raise CostcalcError(f"{origin}: unknown field {quote(key)}{hint}")
    sizes = {**top, "L": sum(g.count for g in groups)}
    if sizes["L"] > MAX_LAYERS:
        raise CostcalcError(f"{origin}: the layer groups hold {sizes['L']:,} layers (at most {MAX_LAYERS:,})")
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise CostcalcError(f"{origin}: field 'source' must be an object")
    title = data.get("title", "")
    if not isinstance(title, str):
        raise CostcalcError(f"{origin}: field 'title' must be a string")
    tied = data.get("tied_embeddings", False)
    if not isinstance(tied, bool):
        raise CostcalcError(f"{origin}: field 'tied_embeddings' must be true or false")
    stated = data.get("stated", {})
    if not isinstance(stated, dict):
        raise CostcalcError(f"{origin}: field 'stated' must be an object")
    state_dtype = data.get("state_dtype", "")
    if state_dtype not in ("",) + tuple(d.value for d in vocab.Dtype):
        raise CostcalcError(f"{origin}: field 'state_dtype' must be one of {', '.join(d.value for d in vocab.Dtype)}, "
                            f"got {quote(state_dtype)}")
    if state_dtype and not any(g.block.stateful for g in groups):
        raise CostcalcError(f"{origin}: field 'state_dtype' applies to models whose layers keep a recurrent state "
                            f"(linear attention, state-space mixers)")
    mtp = _mtp(origin, data["mtp"], top, groups[-1]) if "mtp" in data else None
    dtypes = _dtypes(origin, data.get("dtypes", {}))
    return ModelSpec(name=name, arch=arch, sizes=sizes, title=title, source=source, groups=tuple(groups),
                     tied_embeddings=tied, stated=stated, state_dtype=state_dtype, mtp=mtp, dtypes=dtypes)


def _mtp(origin: str, value: Any, top: dict[str, int], last: Group) -> Group:
    """The ``mtp`` field: ``count`` modules, each the last group's block and sizes unless it gives
    its own ``arch`` (then its sizes come from the top level, as a group's do) and sizes."""
    where = "mtp: "
    if not isinstance(value, dict):
        raise CostcalcError(f"{origin}: field 'mtp' must be an object like {{\"count\": 1}}")
    for key in value:
        if key not in ("count", "arch") + SIZE_KEYS or key in MODEL_KEYS + ("L",):
            raise CostcalcError(f"{origin}: {where}unknown field {quote(key)}")
    count = _positive(origin, "mtp.count", value.get("count"), MAX_LAYERS)
    block = _block(origin, where, value) if "arch" in value else last.block
    if block.mtp:
        raise CostcalcError(f"{origin}: {where}field 'arch' names the decoder block the module runs, without 'mtp:'")
    own = {k: _positive(origin, f"mtp.{k}", v) for k, v in value.items() if k in SIZE_KEYS}
    for key in own:
        if key not in block.sizes():
            raise CostcalcError(f"{origin}: {where}field {quote(key)} is not used by arch {block.key}")
    sizes = {**top, **(last.sizes if "arch" not in value else {}), **own}
    _check_group(origin, where, block, sizes)
    return Group(count, block.with_mtp(), {k: sizes[k] for k in MODEL_KEYS + block.sizes()})


def _dtypes(origin: str, value: Any) -> dict[str, str]:
    """A model's weight formats by module: names ``costcalc.weights`` parses (which keys name a
    module of the model is checked where the bytes are worked out: ``weights.plan``)."""
    from . import weights

    if not isinstance(value, dict):
        raise CostcalcError(f"{origin}: field 'dtypes' must be an object (module -> weight format)")
    for key, fmt in value.items():
        if not NAME.fullmatch(key):
            raise CostcalcError(f"{origin}: field 'dtypes': {quote(key)} is not a module name")
        weights.parse(fmt, f"{origin}: field 'dtypes.{key}'")
    return dict(value)


def _groups(origin: str, layers: Any, top: dict[str, int]) -> tuple[Group, ...]:
    if not isinstance(layers, list) or not layers:
        raise CostcalcError(f"{origin}: field 'layers' must be a non-empty list of groups")
    if len(layers) > MAX_GROUPS:
        raise CostcalcError(f"{origin}: field 'layers' lists {len(layers):,} groups (at most {MAX_GROUPS:,}; "
                            f"identical layers go in one group with a count)")
    out = []
    for index, group in enumerate(layers, start=1):
        where = f"layers[{index}]: "
        if not isinstance(group, dict):
            raise CostcalcError(f"{origin}: {where}expected an object")
        for key in group:
            if key not in ("count", "arch") + SIZE_KEYS or key in MODEL_KEYS + ("L",):
                raise CostcalcError(f"{origin}: {where}unknown field {quote(key)}")
        count = _positive(origin, f"layers[{index}].count", group.get("count"), MAX_LAYERS)
        block = _block(origin, where, group)
        own = {k: _positive(origin, f"layers[{index}].{k}", v) for k, v in group.items() if k in SIZE_KEYS}
        for key in own:
            if key not in block.sizes():
                raise CostcalcError(f"{origin}: {where}field {quote(key)} is not used by arch {block.key}")
        sizes = {**top, **own}
        _check_group(origin, where, block, sizes)
        out.append(Group(count, block, {k: sizes[k] for k in MODEL_KEYS + block.sizes()}))
    return tuple(out)
