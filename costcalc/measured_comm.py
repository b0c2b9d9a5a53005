"""``--timing measured`` on a layout: one collective's measured latency at (op, n ranks, message bytes, dtype).

The tables are aiconfigurator-core's (the wheel ``measured`` reads, pinned at ``measured.PIN``), under
``systems/data/<system>/comm/``:

- ``nccl/<nccl_version>/nccl_perf.parquet``: nccl-tests (``all_reduce_perf``, ``all_gather_perf``,
  ``reduce_scatter_perf``, ``alltoall_perf``; columns ``op_name``, ``nccl_dtype`` half|int8, ``num_gpus``,
  ``message_size``, ``latency``) on one node. The folder is the one the system names
  (``systems/<system>.yaml``, ``misc.nccl_version``), as aiconfigurator's ``NCCL.load_data``
  (``aiconfigurator_core/sdk/operations/communication.py``) resolves it; no other version stands in.
- ``<engine>/<version>/custom_allreduce_perf.parquet``: the engine's own all-reduce
  (``tensor_model_parallel_all_reduce`` under a CUDA graph for vLLM and SGLang, TensorRT-LLM's
  ``AllReduce`` with strategy AUTO; columns ``num_gpus``, ``message_size``, ``latency``; bf16). The rows
  of an eager kernel (``kernel_source``/``backend`` ending ``_eager``) are dropped, as aiconfigurator's
  loader drops them; an engine version without the table takes the newest earlier version of the same
  engine that has one (aiconfigurator's shared-layer source resolver: framework-versioned comm tables
  "may fill from strictly earlier versions"), and the note says which.

Units, from the collectors that wrote the tables (ai-dynamo/aiconfigurator ``collector/collect_nccl.py``,
``collector/collect_all_reduce.py``): ``message_size`` counts ELEMENTS (nccl-tests' byte size divided by
the dtype's bytes; the all-reduce's tensor ``numel``), over the buffer nccl-tests sizes -- an all-reduce's
tensor, an all-gather's gathered output, a reduce-scatter's input, an all-to-all's whole send buffer: the
message ``parallel.Collective.bytes`` holds; ``latency`` is milliseconds.

Which table (aiconfigurator's ``operators/communication.rs``: ``CustomAllReduceOp`` for the tensor-parallel
all-reduces of attention and FFN, ``NCCLOp`` for the rest): an all-reduce is the engine's custom
all-reduce at ``n`` ranks; where that table holds no ``n`` (GB200: measured at 2 and 4 only), NCCL's
all-reduce at ``n`` (aiconfigurator sends GB200 NVL72 all-reduces beyond tp 4 to NCCL); all-gather,
reduce-scatter and all-to-all are NCCL's. A rank count the table did not measure (3, 6, or more than one
node's 8) is not stood in for: ``latency`` answers None and why, and the caller keeps the collective's
roofline alpha-beta time (``collectives.time``). A send/recv has no table (aiconfigurator computes P2P
from bandwidths).

Along the message size (perf_database/communication.rs ``interp_message_size``): the measured value at a
measured size (the first row where one was measured twice, aiconfigurator's "first wins"), linear between
the two nearest measured sizes; above the largest, the largest's latency scaled in proportion to the size
(aiconfigurator holds the boundary's fraction of the linear speed-of-light: the same); below the smallest,
the smallest's latency (a collective is no faster on a smaller message; aiconfigurator scales it down in
proportion there) -- each outside case named in the note.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from .errors import CostcalcError
from .measured import MS, Timing, _linear, _version_key

NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "all_to_all": "alltoall"}            # costcalc's collective -> nccl_perf's op_name
NCCL_DTYPES = {2: "half", 1: "int8"}            # bytes per element -> nccl_perf's nccl_dtype
CUSTOM_DTYPES = {2: "bf16"}                      # the custom all-reduce tables are bf16 only
CUSTOM = "custom_allreduce_perf.parquet"
NCCL = "nccl_perf.parquet"


def latency(timing: Timing, op: str, n: int, message_bytes: int, element_bytes: int = 2) -> tuple[Optional[float], str]:
    """Seconds of one collective ``op`` (all_reduce, all_gather, reduce_scatter, all_to_all) over ``n``
    ranks of one node, on a message of ``message_bytes`` in a dtype of ``element_bytes`` bytes, as
    measured on the system of ``timing`` (``measured.timing``: the engine's all-reduce under its engine
    and version); a note: '' inside what was measured, else what was stood in. None (and why) where no
    table holds it."""
    root, system, engine, version = timing.root, timing.system, timing.engine, timing.version
    if n < 2:
        return 0.0, ""
    if message_bytes % element_bytes:
        raise CostcalcError(f"a {op} message of {message_bytes} bytes is not whole {element_bytes}-byte elements")
    elements = message_bytes // element_bytes
    said = []
    if op == "all_reduce" and element_bytes in CUSTOM_DTYPES:
        found = custom_table(root, system, engine, version)
        if found is not None:
            used, curves = found
            if n in curves:
                t, note = _linear(*curves[n], elements, "elements")
                if used != version:
                    note = "; ".join(filter(None, [f"{engine} {used}'s all-reduce table (none at {version})", note]))
                return t, note
            said.append(f"{engine}'s all-reduce measured at {', '.join(map(str, sorted(curves)))} ranks")
    name = NCCL_OPS.get(op)
    dtype = NCCL_DTYPES.get(element_bytes)
    if name is None or dtype is None:
        return None, f"no table for a {op}" + ("" if dtype else f" of {8 * element_bytes}-bit elements")
    nccl_version, curves = nccl_table(root, system)
    if curves is None:
        return None, f"no NCCL table for {system} (misc.nccl_version {nccl_version})"
    curve = curves.get((dtype, name, n))
    if curve is None:
        have = sorted(r for d, o, r in curves if (d, o) == (dtype, name))
        ranks = ", ".join(map(str, have)) or "no"
        return None, ", ".join(said + [f"NCCL's {name} {'at' if said else 'measured at'} {ranks} ranks, not {n}"])
    t, note = _linear(*curve, elements, "elements")
    return t, "; ".join(filter(None, [*(f"{s}, not {n}: NCCL's all_reduce" for s in said), note]))


@functools.lru_cache(maxsize=None)
def custom_table(root: Path, system: str, engine: str, version: str) -> Optional[tuple[str, dict]]:
    """(the version read, {n ranks: (sorted element counts, seconds)}) of the engine's custom all-reduce:
    at ``version``, else the newest earlier version that has the table; None where none has."""
    folder = root / system / "comm" / engine
    have = sorted((v.name for v in folder.iterdir() if (v / CUSTOM).is_file()), key=_version_key) \
        if folder.is_dir() else []
    usable = [v for v in have if _version_key(v) <= _version_key(version)]
    if not usable:
        return None
    used = usable[-1]
    import pandas as pd

    frame = pd.read_parquet(folder / used / CUSTOM)
    for column in ("kernel_source", "backend"):
        if column in frame:
            frame = frame[~frame[column].astype(str).str.endswith("_eager")]
    return used, _curves(frame, ["num_gpus"], lambda key: int(key[0]))


@functools.lru_cache(maxsize=None)
def nccl_table(root: Path, system: str) -> tuple[str, Optional[dict]]:
    """(the system's ``misc.nccl_version``, {(dtype, op_name, n): (sorted element counts, seconds)} or None
    where that folder holds no table)."""
    import yaml

    spec_path = root.parent / f"{system}.yaml"
    spec = yaml.safe_load(spec_path.read_text()) if spec_path.is_file() else {}
    version = str(((spec or {}).get("misc") or {}).get("nccl_version", ""))
    path = root / system / "comm" / "nccl" / version / NCCL
    if not version or not path.is_file():
        return version or "unset", None
    import pandas as pd

    frame = pd.read_parquet(path, columns=["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
    return version, _curves(frame, ["nccl_dtype", "op_name", "num_gpus"],
                            lambda key: (str(key[0]), str(key[1]), int(key[2])))


def _curves(frame, keys: list, name) -> dict:
    """{name(key values): (sorted message sizes, seconds)}: per key, the first row measured at each size."""
    frame = frame.drop_duplicates([*keys, "message_size"], keep="first")
    out = {}
    for key, part in frame.groupby(keys, sort=True):
        part = part.sort_values("message_size", kind="stable")
        out[name(key if isinstance(key, tuple) else (key,))] = (part["message_size"].astype("int64").tolist(),
                                                                (part["latency"] * MS).tolist())
    return out
