"""``--timing measured``: each operator's time from NVIDIA aiconfigurator's measured kernel tables.

The tables ship in the ``aiconfigurator-core`` wheel (Apache-2.0; the optional extra
``pip install 'costcalc[measured]'`` pins 0.12.0) as parquet files under
``aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/``: latencies in milliseconds
of one kernel at one shape, measured on that GPU under that engine. This module reads them (pandas
and pyarrow; the package's compiled engine is never imported) and answers, for one operator of a
forward, the time of that very shape:

- a projection (a plain GEMM: ``m`` = the forward's tokens, ``k`` = fan_in, ``n`` = fan_out, in the
  matrix's dtype; int8/int4 under 16-bit activations in the weight-only tables, fp16 in bfloat16's, said in
  the row): ``gemm_perf`` -- linear in ``m`` between the two nearest measured ``m`` at each of
  the measured (n, k) around the shape, then bilinear in (n, k) between those (the grid is a full
  product: 74 m x 22 n x 22 k, a few cells missing; a missing corner falls back to the nearest
  measured (n, k) and says so);
- attention of an uncached prefill (``context_attention_perf``: batch, prompt length, query heads, KV
  heads, head dim, KV dtype, no window -- or one the positions never pass) and of a decode step
  (``generation_attention_perf``: batch and
  the keys read, ``isl + step`` in the collector's terms = T + 1): at the exact heads, KV heads and
  head dim measured, bilinear in (batch, length) between the nearest measured ones; the decode phase
  of ``generate`` (N-1 steps) looks each step up (its GEMMs N-1 times at m = B, its attention at
  S + j keys for step j), up to ``roofline.MAX_LOOKED_UP_STEPS`` steps.

Outside what was measured nothing is extrapolated silently: below the smallest measured size the
smallest one's latency is taken (a kernel is not faster on fewer rows), above the largest the largest
one's latency is scaled in proportion (``m`` twice the largest: twice its time), and the row's
``measured_coverage`` names each such operator and size. The norms, residual adds, activations and
embedding gather, which costcalc counts no FLOPs for, are aiconfigurator's mem ops (``Timing.mem_ops``:
its model files' op list, its ``query_mem_op`` formula and system constants), added to the estimate as
``mem_ops_time_s``. An operator the tables do not hold (windows the positions pass, state-space mixers, a
cached prefill's attention, a decode phase of more than ``roofline.MAX_LOOKED_UP_STEPS`` steps) keeps its
roofline floor, and ``measured_coverage`` names it.
A MoE layer's routed experts (the fused-MoE kernel), DeepSeek-V3-shaped MLA (vLLM's attention module;
the other engines' MLA kernels and absorbed products), DeepSeek-V3.2's sparse MLA (vLLM's DSA module) and Gated DeltaNet's scan and convolution are looked
up by ``measured_fused``.
An estimate below the floor (interpolation between two points can dip under it) is raised to the floor.
On a layout (``--tp/--ep/--pp/--dp``) each device's operators are looked up at its shard's shapes and each
collective in the NCCL and custom all-reduce tables (``costcalc.measured_comm``).
"""
from __future__ import annotations

import bisect
import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .errors import CostcalcError, quote

PIN = "0.12.0"          # the aiconfigurator-core whose tables the docs and tests describe
INSTALL = "pip install 'costcalc[measured]'"
ENGINES = ("vllm", "trtllm", "sglang")
DEFAULT_ENGINE = "vllm"
MS = 1e-3               # the tables' latencies are milliseconds

# costcalc device profile -> aiconfigurator system (systems/<system>.yaml, systems/data/<system>/)
# (a system whose folder holds no GEMM table, as h100_pcie's and l4's in 0.12.0, is refused like an unmapped device)
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "a100": "a100_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
           "gb200": "gb200", "l40s": "l40s", "h100-pcie": "h100_pcie", "l4": "l4",
           "rtx-pro-6000": "rtx_pro_6000_server"}   # a10g: aiconfigurator measured no A10G (no system)
# weight format -> gemm_dtype: bf16; fp8 per tensor (costcalc's generic fp8, fp8-tensor); DeepSeek's 128x128
# blocks (fp8-block128, either scale byte)
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-tensor": "fp8", "fp8-block128": "fp8_block",
               "fp8-block128-ue8m0": "fp8_block", "fp8-block128x128": "fp8_block", "fp8-block128x128-ue8m0": "fp8_block"}
# int8/int4 weights under 16-bit activations are weight-only (w8a16, w4a16): the tables' int8_wo/int4_wo, which
# TensorRT-LLM's WeightOnlyQuantMatmul was measured as (A100's trtllm 1.0.0 tables; aiconfigurator's GEMMQuantMode
# int8_wo/int4_wo, "dequantize to bf16 before the MMA", sdk/common.py)
WEIGHT_ONLY = {"int8": "int8_wo", "int4": "int4_wo"}
SIXTEEN_BIT = ("bf16", "fp16")
# fp16 has no tables of its own (0.12.0 measured bfloat16): the bfloat16 table stands in -- the same 2-byte
# operands and the same tensor-core peak on every NVIDIA part mapped here (their datasheets print one FP16 and
# BF16 Tensor Core figure) -- and each row says so in measured_coverage
STAND_IN = {"fp16": "bf16"}
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}        # --kv-dtype -> kv_cache_dtype
ACT_BYTES = 2   # a mem op's activations: aiconfigurator's ElementWise/Embedding count 2 bytes ("bfloat16 for act")


def data_root() -> Path:
    """The tables' folder of the installed aiconfigurator-core (without importing its compiled engine);
    a one-line error saying how to install it where it is absent."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise CostcalcError(f"--timing measured needs aiconfigurator-core's measured kernel tables: {INSTALL}")
    if importlib.util.find_spec("pyarrow") is None:
        raise CostcalcError(f"--timing measured reads parquet tables, which needs pyarrow: {INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def system_of(device: str, root: Path) -> str:
    """The aiconfigurator system measured for a costcalc device; a device without tables is refused."""
    have = sorted(d for d, s in SYSTEMS.items() if (root / s / "gemm").is_dir())
    system = SYSTEMS.get(device)
    if system is None or not (root / system / "gemm").is_dir():
        raise CostcalcError(f"--timing measured: no measured kernel tables for device {quote(device)} "
                            f"(tables exist for: {', '.join(have)})")
    return system


def _version_key(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def versions(root: Path, system: str, engine: str) -> list[str]:
    """The engine versions with both GEMM and attention tables for ``system``, oldest first."""
    def have(op: str, name: str) -> set[str]:
        folder = root / system / op / engine
        return {v.name for v in folder.iterdir() if (v / name).is_file()} if folder.is_dir() else set()
    both = have("gemm", "gemm_perf.parquet") & have("attention", "context_attention_perf.parquet")
    return sorted(both, key=_version_key)


@dataclass(frozen=True, eq=False)
class Timing:
    """Measured timing on one system under one engine version (``Machine.timing``)."""
    device: str
    system: str
    engine: str
    version: str
    root: Path = field(repr=False)

    def labels(self) -> dict:
        return {"timing": "measured", "engine": self.engine, "engine_version": self.version}

    def gemm(self, m: int, n: int, k: int, dtype: str, act: str = "bf16") -> tuple[Optional[float], str]:
        """Seconds of one GEMM (m x k by k x n) in weight dtype ``dtype`` under activations ``act``, and a
        note ('' where the shape lies inside what was measured); None where the tables hold no such dtype."""
        table = _gemm_table(self.root / self.system / "gemm" / self.engine / self.version / "gemm_perf.parquet")
        said = ""
        if dtype in STAND_IN:
            said, dtype = f"{dtype} read from the {STAND_IN[dtype]} table", STAND_IN[dtype]
        name = WEIGHT_ONLY.get(dtype, "") if act in SIXTEEN_BIT else ""
        grid = table.get(name or GEMM_DTYPES.get(dtype, ""))
        if grid is None:
            return None, f"no {dtype} GEMM table" + (f" under {act} activations" if dtype in WEIGHT_ONLY else "")
        got, note = _gemm(grid, m, n, k)
        return got, "; ".join(filter(None, [said, note]))

    def mem_op(self, nbytes: float) -> float:
        """Seconds of one memory-bound kernel moving ``nbytes`` (a norm, a residual add, an activation, an
        embedding gather), as aiconfigurator models every such kernel (``PerfDatabase.query_mem_op``, its
        non-SOL mode): ``nbytes / (mem_bw * mem_bw_empirical_scaling_factor) + mem_empirical_constant_latency``,
        the three read from the system's ``systems/<system>.yaml`` (0.8 and 3 us on every system mapped here)."""
        gpu = _system_gpu(self.root.parent / f"{self.system}.yaml")
        return nbytes / (gpu["mem_bw"] * gpu["mem_bw_empirical_scaling_factor"]) + gpu["mem_empirical_constant_latency"]

    def mem_ops(self, groups, tokens: int) -> float:
        """Seconds of the memory-bound kernels of one forward of ``tokens`` tokens that costcalc counts no
        FLOPs for (norms, residual adds, the MLP's activation, the embedding gather), as aiconfigurator's
        model files list them for every layer (sdk/models/llama.py, gpt.py, moe.py: ``add_norm_1`` and
        ``add_norm_2``, ElementWise 2d in and 2d out each; ``act_gate`` 2m in, m out after a gated MLP,
        ``act`` m in, m out after a plain one; none after routed experts, whose kernel applies it) and once
        per forward (``embedding``, d out per token); each ``mem_op`` at 2 bytes an element. ``groups``:
        the model's layer groups (a device's sizes on a layout)."""
        total, d_first = 0.0, None
        for group in groups:
            d = group.sizes["d"]
            d_first = d if d_first is None else d_first
            ops = [(2 * d + 2 * d)] * 2
            if group.block.ffn == "dense":
                ops.append(2 * group.sizes["m"] + group.sizes["m"])
            elif group.block.ffn == "mlp":
                ops.append(2 * group.sizes["m"])
            total += group.count * sum(self.mem_op(tokens * width * ACT_BYTES) for width in ops)
        return total + (self.mem_op(tokens * d_first * ACT_BYTES) if d_first else 0.0)

    def attention(self, phase: str, batch: int, length: int, shape: tuple) -> tuple[Optional[float], str]:
        """Seconds of one attention layer: ``phase`` context (``length`` = the prompt) or generation
        (``length`` = the keys read, T + 1), ``shape`` = (heads, KV heads, head dim, KV dtype); None (and
        why) where no table holds these heads."""
        heads, kv_heads, head_dim, kv_dtype = shape
        name = f"{phase}_attention_perf.parquet"
        table = _attention_table(self.root / self.system / "attention" / self.engine / self.version / name)
        said = f"KV {kv_dtype} read from the {STAND_IN[kv_dtype]} table" if kv_dtype in STAND_IN else ""
        key = (KV_DTYPES.get(STAND_IN.get(kv_dtype, kv_dtype), ""), heads, kv_heads, head_dim)
        if key not in table:
            return None, f"no {phase} attention measured for {heads} heads, {kv_heads} KV heads, head dim " \
                         f"{head_dim}, KV {kv_dtype}"
        got, note = _bilinear(table[key], batch, length, ("batch", "keys" if phase == "generation" else "seq"))
        return got, "; ".join(filter(None, [said, note]))


def timing(device: str, engine: Optional[str], version: Optional[str]) -> Timing:
    """``--timing measured`` on ``device`` (``--engine``, ``--engine-version``; the newest version where
    none is given)."""
    engine = (engine or DEFAULT_ENGINE).lower()
    if engine not in ENGINES:
        raise CostcalcError(f"--engine: {quote(engine)} is not one of {', '.join(ENGINES)}")
    root = data_root()
    system = system_of(device, root)
    have = versions(root, system, engine)
    if not have:
        raise CostcalcError(f"--timing measured: no {engine} tables for {device} ({system})")
    if version is None:
        version = have[-1]
    elif version not in have:
        raise CostcalcError(f"--engine-version: {engine} on {device} was measured at {', '.join(have)}, "
                            f"not {quote(version)}")
    return Timing(device, system, engine, version, root)


# --- the tables --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _gemm_table(path: Path) -> dict:
    """gemm_dtype -> {(n, k): (sorted m list, latencies in seconds)} (the fastest kernel where several
    were measured at one shape)."""
    import pandas as pd

    frame = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    frame = frame.groupby(["gemm_dtype", "n", "k", "m"], as_index=False, sort=True)["latency"].min()
    out: dict = {}
    for (dtype, n, k), ms, lat in _runs(frame, ["gemm_dtype", "n", "k"], "m"):
        out.setdefault(dtype, {})[(int(n), int(k))] = (ms, lat)
    return out


@functools.lru_cache(maxsize=None)
def _system_gpu(path: Path) -> dict:
    """The ``gpu`` section of an aiconfigurator system description (mem_bw, its empirical factors, ...)."""
    import yaml      # a dependency of aiconfigurator-core

    try:
        gpu = yaml.safe_load(path.read_text())["gpu"]
        return {key: float(gpu[key]) for key in ("mem_bw", "mem_bw_empirical_scaling_factor",
                                                 "mem_empirical_constant_latency")}
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise CostcalcError(f"measured system description {path.name} cannot be read: {exc}") from None


@functools.lru_cache(maxsize=None)
def _attention_table(path: Path) -> dict:
    """(kv dtype, heads, kv heads, head dim) -> {batch: (sorted lengths, seconds)}, window 0 only; the
    length is the prompt (context) or the keys read, isl + step (generation)."""
    import pandas as pd

    frame = pd.read_parquet(path)
    for column, plain in (("window_size", 0), ("beam_width", 1)):    # older tables measured these only
        if column in frame:
            frame = frame[frame[column] == plain]
    missing = [c for c in ("isl", "kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "batch_size",
                           "latency") if c not in frame]
    if missing:
        raise CostcalcError(f"measured attention table {path.parent.parent.name}/{path.parent.name}/{path.name} "
                            f"has no {', '.join(missing)} column: it cannot be read")
    frame = frame.assign(length=frame["isl"] + (frame["step"] if "step" in frame else 0))
    keys = ["kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "batch_size"]
    frame = frame.groupby([*keys, "length"], as_index=False, sort=True)["latency"].min()
    out: dict = {}
    for (kv, h, hkv, d, b), lengths, lat in _runs(frame, keys, "length"):
        out.setdefault((kv, int(h), int(hkv), int(d)), {})[int(b)] = (lengths, lat)
    return out


def _runs(frame, keys: list, axis: str):
    """(key values, the axis's values, latencies in seconds) for each run of equal ``keys`` of a frame
    sorted by ``keys`` then ``axis`` (plain lists: a lookup is a bisect)."""
    import numpy as np

    change = np.zeros(len(frame), dtype=bool)
    for k in keys:
        values = frame[k].to_numpy()
        change[1:] |= values[1:] != values[:-1]
    starts = [0, *np.flatnonzero(change).tolist(), len(frame)]
    columns = [frame[k].tolist() for k in keys]
    xs, lat = frame[axis].astype("int64").tolist(), (frame["latency"] * MS).tolist()
    for lo, hi in zip(starts, starts[1:]):
        if hi > lo:
            yield tuple(c[lo] for c in columns), xs[lo:hi], lat[lo:hi]


def _linear(xs: list, ys: list, x: int, name: str) -> tuple[float, str]:
    """Linear between the two nearest measured ``xs``; the smallest's value below them, the largest's
    scaled in proportion above them, each with a note."""
    if x < xs[0]:
        return ys[0], f"{name}={x} below the smallest measured {xs[0]} (its time taken)"
    if x > xs[-1]:
        return ys[-1] * x / xs[-1], f"{name}={x} above the largest measured {xs[-1]} (time scaled in proportion)"
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i], ""
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0), ""


def _around(values: list, x: int) -> tuple[int, int, float]:
    """The measured values on either side of x and x's weight toward the upper one (clamped to the ends)."""
    if x <= values[0]:
        return values[0], values[0], 0.0
    if x >= values[-1]:
        return values[-1], values[-1], 0.0
    i = bisect.bisect_left(values, x)
    lo, hi = values[i - 1], values[i]
    return (x, x, 0.0) if values[i] == x else (lo, hi, (x - lo) / (hi - lo))


def _gemm(grid: dict, m: int, n: int, k: int) -> tuple[float, str]:
    ns, ks = sorted({a for a, _ in grid}), sorted({b for _, b in grid})
    notes = []
    for name, x, axis in (("n", n, ns), ("k", k, ks)):
        if x < axis[0]:
            notes.append(f"{name}={x} below the smallest measured {axis[0]} (its time taken)")
        elif x > axis[-1]:
            notes.append(f"{name}={x} above the largest measured {axis[-1]} (time scaled in proportion)")
    n0, n1, wn = _around(ns, n)
    k0, k1, wk = _around(ks, k)
    corners: dict = {}
    for nn, kk, w in ((n0, k0, (1 - wn) * (1 - wk)), (n1, k0, wn * (1 - wk)), (n0, k1, (1 - wn) * wk),
                      (n1, k1, wn * wk)):
        corners[(nn, kk)] = corners.get((nn, kk), 0.0) + w
    total, m_note = 0.0, ""
    for (nn, kk), w in corners.items():
        if not w:
            continue
        if (nn, kk) not in grid:      # a missing cell: the nearest measured (n, k)
            nn, kk = min(grid, key=lambda c: abs(c[0] - nn) / nn + abs(c[1] - kk) / kk)
            notes.append(f"(n, k)=({n}, {k}) near an unmeasured cell: nearest measured ({nn}, {kk}) used")
        ms, lat = grid[(nn, kk)]
        t, m_note = _linear(ms, lat, m, "m")
        total += w * t
    t = total * (n / ns[-1] if n > ns[-1] else 1) * (k / ks[-1] if k > ks[-1] else 1)
    return t, "; ".join(dict.fromkeys(filter(None, [m_note, *notes])))


def _bilinear(by_batch: dict, batch: int, length: int, names: tuple[str, str]) -> tuple[float, str]:
    """Bilinear in (batch, length) between the nearest measured; a batch whose lengths stop short of
    ``length`` is stood in for by the largest batch measured at that length, scaled in proportion."""
    batches = sorted(by_batch)
    b0, b1, wb = _around(batches, batch)
    notes = []
    if batch < batches[0] or batch > batches[-1]:
        notes.append(f"{names[0]}={batch} {'below the smallest' if batch < batches[0] else 'above the largest'} "
                     f"measured {batches[0] if batch < batches[0] else batches[-1]}"
                     + (" (time scaled in proportion)" if batch > batches[-1] else " (its time taken)"))
    total = 0.0
    for b, w in ((b0, 1 - wb), (b1, wb)):
        if not w:
            continue
        lengths, lat = by_batch[b]
        if lengths[0] <= length <= lengths[-1] or b == batches[0]:
            t, note = _linear(lengths, lat, length, names[1])
        else:                       # this batch was not measured this long: the largest batch that was
            cover = [c for c in batches if by_batch[c][0][-1] >= length]
            stand = cover[-1] if cover else batches[0]
            t, note = _linear(*by_batch[stand], length, names[1])
            t *= b / stand
            note = (note + "; " if note else "") + f"{names[0]}={b} not measured at {names[1]}={length}: " \
                                                   f"{names[0]}={stand} scaled in proportion"
        notes.append(note)
        total += w * t
    t = total * (batch / batches[-1] if batch > batches[-1] else 1)
    return t, "; ".join(dict.fromkeys(filter(None, notes)))

