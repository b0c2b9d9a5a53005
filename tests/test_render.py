"""The standard-library writers give what pandas gives, so pandas is needed only for Markdown."""
import io
import json

import numpy as np

from costcalc import calc, presets, render
from costcalc.render import Columns


def sample_rows():
    spec = presets.load("llama-3.1-405b")
    rows = [calc.prefill(spec, 131072, 64, c) for c in ("causal", "full", "tiled")]
    rows += calc.chunked(spec, 10_000, 3000, convention="tiled")
    rows += [{"preset": 'a "quoted", name', "note": "50% off", "ratio": 0.1234, "ok": True, "gap": None}]
    return rows


def test_csv_is_what_pandas_writes():
    rows = sample_rows()
    assert render.render(rows, "csv") == render.frame(rows).to_csv(index=False)
    table = render.as_table(rows)
    assert render.render(Columns(table), "csv") == render.frame(rows).to_csv(index=False)


def test_column_csv_of_a_large_sweep_is_what_csv_writer_writes():
    spec = presets.load("mixtral-8x7b")
    n = 3 * render.CHUNK // 2   # more than one block
    table = calc.table(spec, "prefill", "full", "last", None, batch=np.full(n, 7), seq=np.arange(1, n + 1))
    table["label"] = ["x,y" if i % 3 else "plain" for i in range(n)]
    import csv

    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(table)
    writer.writerows(zip(*table.values()))
    assert render.render(table, "csv") == expected.getvalue()


def test_json_has_the_records_pandas_writes_with_exact_integers():
    rows = sample_rows()
    ours = json.loads(render.render(rows, "json"))
    theirs = json.loads(render.frame(rows).to_json(orient="records"))
    assert ours == theirs
    assert ours[0]["total_flops"] > 2**63 and isinstance(ours[0]["total_flops"], int)


def test_a_wide_row_without_flops_keeps_a_grid_and_claims_nothing_left_out():
    """One row of plain numbers, wider than the width: constants go to the header from the
    right only until it fits, and no 'left out' note names shares it never had."""
    row = {"seq": 1024, "causal_s": 0.008051, "full_s": 0.007961, "measured_ratio": 1.011,
           "tile_model_ratio": 0.75, "triangle_ratio": 0.5, "kernel_tile": "64x512"}
    text = render.render([row], "table", width=80)
    lines = text.splitlines()
    assert "left out" not in text
    assert lines[0] == "kernel_tile 64x512"
    grid = [l for l in lines[1:] if l.strip()]
    assert grid[0].split() == ["seq", "causal_s", "full_s", "measured_ratio", "tile_model_ratio", "triangle_ratio"]
    assert grid[2].split()[:3] == ["1024", "8.051", "ms"] and max(map(len, lines)) <= 80   # seconds in units


def test_shares_keep_a_decimal_at_every_size():
    from costcalc.units import share

    assert [share(p, 1000) for p in (0, 1000, 999, 420, 100, 10, 12, 3, 0)] == \
        ["0%", "100%", "99.9%", "42%", "10%", "1.0%", "1.2%", "0.3%", "0%"]
    assert share(1, 10**6) == "<0.01%" and share(1, 0) == "-" and share(99_999, 100_000) == ">99.9%"
