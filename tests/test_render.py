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
