"""``--timing measured`` on a layout: each collective from aiconfigurator-core's NCCL and custom all-reduce
tables (``costcalc.measured_comm``), read here again from the raw parquet files; skipped without the tables
(``pip install 'costcalc[measured]'``)."""
from pathlib import Path

import pytest

from cli_run import run
from measured_tables import tables, csv_rows
from costcalc import measured
from costcalc.measured_comm import latency
from costcalc.devices import load as device
from costcalc.errors import CostcalcError

LLAMA_D, LLAMA_V, LLAMA_L = 4096, 128256, 32        # llama-3.1-8b: d, vocabulary, layers
TERMS = ("attn_proj", "ffn", "attention", "lm_head")


def custom(root: Path, system: str, engine: str, version: str, n: int) -> tuple[list, list]:
    """(element counts, seconds) of the engine's CUDA-graph all-reduce at n ranks, first row per size."""
    import pandas as pd

    t = pd.read_parquet(root / system / "comm" / engine / version / "custom_allreduce_perf.parquet")
    t = t[(t.num_gpus == n) & ~t.kernel_source.str.endswith("_eager")].drop_duplicates("message_size")
    t = t.sort_values("message_size")
    return t.message_size.tolist(), (t.latency * 1e-3).tolist()


def nccl(root: Path, system: str, op: str, n: int) -> tuple[list, list]:
    """(element counts, seconds) of NCCL's ``op`` in half precision at n ranks, from the folder the
    system's yaml names (misc.nccl_version), first row per size."""
    import pandas as pd
    import yaml

    version = yaml.safe_load((root.parent / f"{system}.yaml").read_text())["misc"]["nccl_version"]
    t = pd.read_parquet(root / system / "comm" / "nccl" / str(version) / "nccl_perf.parquet")
    t = t[(t.op_name == op) & (t.num_gpus == n) & (t.nccl_dtype == "half")].drop_duplicates("message_size")
    t = t.sort_values("message_size")
    return t.message_size.tolist(), (t.latency * 1e-3).tolist()


def between(xs: list, ys: list, x: float) -> float:
    """Linear between the two measured sizes around x (x inside them)."""
    i = next(i for i, v in enumerate(xs) if v >= x)
    if xs[i] == x:
        return ys[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def test_a_measured_size_is_the_tables_value():
    root = tables()
    timing = measured.timing("h100", "vllm", "0.24.0")
    for n in (2, 4, 8):
        sizes, lat = custom(root, "h100_sxm", "vllm", "0.24.0", n)
        for i in (0, len(sizes) // 2, len(sizes) - 1):
            assert latency(timing, "all_reduce", n, 2 * sizes[i]) == (lat[i], "")
        sizes, lat = nccl(root, "h100_sxm", "all_gather", n)
        assert latency(timing, "all_gather", n, 2 * sizes[3]) == (lat[3], "")
        sizes, lat = nccl(root, "h100_sxm", "alltoall", n)
        assert latency(timing, "all_to_all", n, 2 * sizes[5]) == (lat[5], "")


def test_between_measured_sizes_lies_between_the_neighbours():
    root = tables()
    timing = measured.timing("h100", "trtllm", "1.3.0rc20")
    sizes, lat = custom(root, "h100_sxm", "trtllm", "1.3.0rc20", 4)
    for i in (3, 10, 18):
        x = (sizes[i] + sizes[i + 1]) // 2
        got, note = latency(timing, "all_reduce", 4, 2 * x)
        assert min(lat[i], lat[i + 1]) <= got <= max(lat[i], lat[i + 1]) and note == ""
        assert got == pytest.approx(between(sizes, lat, x), rel=1e-12)


def test_outside_what_was_measured_is_named():
    root = tables()
    timing = measured.timing("h100", "vllm", "0.24.0")
    sizes, lat = custom(root, "h100_sxm", "vllm", "0.24.0", 8)
    got, note = latency(timing, "all_reduce", 8, 2 * 4 * sizes[-1])       # 4x the largest: 4x its time
    assert got == pytest.approx(4 * lat[-1], rel=1e-12) and "above the largest measured" in note
    got, note = latency(timing, "all_reduce", 8, 2 * (sizes[0] // 2))    # half the smallest: its time
    assert got == lat[0] and "below the smallest measured" in note
    got, note = latency(timing, "all_reduce", 6, 2 * sizes[5])           # 6 ranks: measured at 2, 4, 8 only
    assert got is None and "not 6" in note
    got, note = latency(timing, "send_recv", 2, 1024)
    assert got is None and "no table" in note


def test_an_engine_version_without_the_table_takes_the_newest_earlier_one():
    root = tables()
    assert not (root / "l40s/comm/vllm/0.24.0/custom_allreduce_perf.parquet").exists()
    sizes, lat = custom(root, "l40s", "vllm", "0.22.0", 4)
    got, note = latency(measured.timing("l40s", "vllm", "0.24.0"), "all_reduce", 4, 2 * sizes[7])
    assert got == lat[7] and "vllm 0.22.0's all-reduce table (none at 0.24.0)" in note


@pytest.mark.parametrize("tp, batch", [(2, 256), (8, 32)])
def test_a_decode_rows_comm_time_is_its_collectives_from_the_tables(capsys, tp, batch):
    """llama-3.1-8b decode on H100 under vLLM 0.24.0: per step an all-reduce of the B x d bf16
    activations after the embedding and after each of the 32 layers' o_proj and down_proj (65), and an
    all-gather of the B x V logits; each its table's latency, or the roofline's alpha + factor S / B
    where that is longer (raised to the floor, as an operator is)."""
    root = tables()
    h100 = device("h100")
    up = h100.scale_up

    def floor(factor, size):
        return up.latency_s + factor * size / up.bytes_per_s_each_way
    reduce_elems, gather_elems = batch * LLAMA_D, batch * LLAMA_V
    reduce = between(*custom(root, "h100_sxm", "vllm", "0.24.0", tp), reduce_elems)
    gather = between(*nccl(root, "h100_sxm", "all_gather", tp), gather_elems)
    reduce_factor = 1 if up.all_reduce == "in_network" else 2 * (tp - 1) / tp    # the profile's algorithm
    reduce_floor = floor(reduce_factor, 2 * reduce_elems)
    gather_floor = floor((tp - 1) / tp, 2 * gather_elems)
    assert reduce > reduce_floor        # these batches are where the table, not the floor, sets the time
    expected = (1 + 2 * LLAMA_L) * reduce + max(gather, gather_floor)
    base = ("decode", "-p", "llama-3.1-8b", "--context", "1k", "--batch", str(batch), "--device", "h100",
            "--tp", str(tp), "-f", "csv")
    _, plain, _ = run(capsys, *base)
    code, out, err = run(capsys, *base, "--timing", "measured", "--engine", "vllm", "--engine-version", "0.24.0")
    assert code == 0, err
    floor_row, row = csv_rows(plain)[0], csv_rows(out)[0]
    assert float(row["comm_time_s"]) == pytest.approx(expected, rel=1e-9)
    assert float(row["comm_floor_time_s"]) == float(floor_row["comm_time_s"])
    assert float(row["floor_time_s"]) == float(floor_row["time_s"])            # the floor is the roofline's
    assert float(row["comm_floor_time_s"]) <= float(row["comm_time_s"])


@pytest.mark.parametrize("args", [
    ("prefill", "-p", "llama-3.1-8b", "--seq", "2k", "--tp", "2"),
    ("prefill", "-p", "mixtral-8x7b", "--seq", "128", "--tp", "2", "--weight-dtype", "fp8"),
    ("decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "1,64", "--tp", "4", "--pp", "2"),
    ("decode", "-p", "llama-3.1-8b", "--context", "4k", "--batch", "8", "--tp", "4", "--dp", "2"),
    ("generate", "-p", "llama-3.1-8b", "--prompt", "128", "--new", "3", "--tp", "8"),
])
@pytest.mark.parametrize("overlap", ["full", "none"])
def test_the_floor_is_at_or_below_the_estimate_on_every_row(capsys, args, overlap):
    tables()
    code, out, err = run(capsys, *args, "--device", "h100", "--timing", "measured", "--engine", "trtllm",
                         "--overlap", overlap, "-f", "csv")
    assert code == 0, err
    for row in csv_rows(out):
        assert float(row["floor_time_s"]) <= float(row["time_s"])
        assert float(row["comm_floor_time_s"]) <= float(row["comm_time_s"])
        for term in TERMS:
            if row.get(f"{term}_floor_time_s"):
                assert float(row[f"{term}_floor_time_s"]) <= float(row[f"{term}_time_s"])
        assert float(row["efficiency"]) == round(float(row["floor_time_s"]) / float(row["time_s"]), 4)


@pytest.mark.parametrize("overlap", ["full", "none"])
def test_overlap_meets_the_looked_up_times_as_it_meets_the_floor(capsys, overlap):
    """One device's estimate is its terms' looked-up times and its mem ops summed; the step is that and the
    looked-up collectives, added (none) or the larger (full)."""
    tables()
    code, out, err = run(capsys, "prefill", "-p", "llama-3.1-8b", "--seq", "1k", "--batch", "1,8", "--tp", "4",
                         "--device", "h100", "--timing", "measured", "--overlap", overlap, "-f", "csv")
    assert code == 0, err
    for row in csv_rows(out):
        own = sum(float(row[f"{t}_time_s"]) for t in TERMS) + float(row["mem_ops_time_s"])
        comm = float(row["comm_time_s"])
        want = own + comm if overlap == "none" else max(own, comm)
        assert float(row["time_s"]) == pytest.approx(want, rel=1e-12)


def test_what_keeps_its_floor_is_named(capsys):
    """A group over 16 H100s spans two 8-GPU NVLink domains (the tables are one node's), and a pipeline's
    send/recv has no table: both keep the roofline time and the row names them."""
    tables()
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "1k", "--batch", "64", "--tp", "16",
                         "--device", "h100", "--timing", "measured", "-f", "csv")
    assert code == 0, err
    row = csv_rows(out)[0]
    assert "spans scale-up domains" in row["measured_coverage"]
    assert float(row["comm_time_s"]) == float(row["comm_floor_time_s"])
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "1k", "--batch", "64", "--tp", "2",
                         "--pp", "2", "--device", "h100", "--timing", "measured", "-f", "csv")
    assert code == 0, err
    assert "send_recv (stage boundary): no table" in csv_rows(out)[0]["measured_coverage"]


# Every within-one-node collective the tables measured, against the roofline's floor for it.
ELEMENT_BYTES = {"half": 2, "int8": 1, "bfloat16": 2}       # nccl_dtype / allreduce_dtype -> bytes per element
TABLE_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "alltoall": "all_to_all"}                      # the tables' op_name -> costcalc's collective
# Rows that may sit under the floor, each with why (as the kernel truth test pins warm-L2 rows): none now.
PINNED: dict = {}


def measured_rows(root: Path, system: str):
    """Every row of every NCCL and custom all-reduce table of ``system`` (every version, eager rows too):
    engine, version, op (costcalc's), n, bytes, seconds."""
    import pandas as pd

    frames = []
    for name in ("nccl_perf.parquet", "custom_allreduce_perf.parquet"):
        for path in sorted((root / system / "comm").glob(f"*/*/{name}")):
            t = pd.read_parquet(path)
            dtype = t["nccl_dtype"] if "nccl_dtype" in t else t["allreduce_dtype"]
            unknown = set(dtype.astype(str)) - set(ELEMENT_BYTES)
            assert not unknown, f"{path}: dtype {unknown} has no element size here"
            assert set(t.op_name.astype(str)) <= set(TABLE_OPS), f"{path}: ops {set(t.op_name)}"
            frames.append(pd.DataFrame({
                "engine": path.parent.parent.name, "version": path.parent.name,
                "op": t.op_name.astype(str).map(TABLE_OPS), "n": t.num_gpus.astype("int64"),
                "bytes": t.message_size.astype("int64") * dtype.astype(str).map(ELEMENT_BYTES).astype("int64"),
                "seconds": t.latency.astype(float) * 1e-3}))
    return pd.concat(frames, ignore_index=True) if frames else None


def test_the_collectives_floor_is_at_or_below_every_measured_collective():
    """issue 22's truth rule for communication: on every system costcalc maps with comm tables, the
    roofline's time for each measured collective (``collectives.time`` over the profile's scale-up link:
    its alpha, its bandwidth for n ranks, the op's factor under the link's all-reduce algorithm) is at or
    below the latency measured for it -- NCCL's four collectives and each engine's custom all-reduce, in
    every version the wheel holds. A row under it is a profile or formula bug unless PINNED says why."""
    import numpy as np

    from costcalc import collectives

    root = tables()
    checked, under = 0, []
    for name, system in sorted(measured.SYSTEMS.items()):
        rows = measured_rows(root, system)
        if rows is None:
            continue
        up = device(name).scale_up
        if up is None:          # no links (rtx-pro-6000): a layout over several is refused, no collective timed
            with pytest.raises(CostcalcError, match="no interconnect.scale_up"):
                device(name).link("scale_up")
            continue
        rows = rows[rows.n <= (up.domain or rows.n.max())]
        for (op, n), part in rows.groupby(["op", "n"]):
            n = int(n)
            factor = float(collectives.factor(op, n, collectives.algorithm_on(op, up)))
            floor = up.latency_s + factor * part["bytes"].to_numpy(float) / up.bandwidth(n)
            first = part.iloc[0]          # the vectorised floor is collectives.time's
            assert floor[0] == pytest.approx(collectives.time(op, n, int(first["bytes"]), up), rel=1e-12)
            bad = part[floor > part["seconds"].to_numpy()]
            for row in bad.itertuples():
                if (name, row.engine, row.version, op, n, row.bytes) not in PINNED:
                    under.append(f"{name} {row.engine} {row.version} {op} n={n} {row.bytes} B: measured "
                                 f"{row.seconds * 1e6:.3f} us < floor {(floor[part.index.get_loc(row.Index)]) * 1e6:.3f} us")
            checked += len(part)
    assert checked > 10000, checked
    assert not under, f"{len(under)} rows under the floor, e.g. " + "; ".join(under[:8])
