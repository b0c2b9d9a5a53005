"""What the measured-timing tests share: the installed tables (the test skips without them), a parquet
table read whole, and a CSV answer's rows."""
from __future__ import annotations

from pathlib import Path

import pytest

from costcalc import measured


def tables() -> Path:
    """aiconfigurator-core's tables folder; the calling test is skipped where the extra is not installed."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    return measured.data_root()


def frame(path: Path):
    import pandas as pd

    return pd.read_parquet(path)


def csv_rows(text: str) -> list[dict]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))
