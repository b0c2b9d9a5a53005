"""What the config-import tests share: the real configs' folder, a small base config, the
layer kinds a config imports as, and a refusal in one line."""
from pathlib import Path

import pytest

from costcalc import hf
from costcalc.errors import CostcalcError

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128)


def kinds(config: dict) -> list[tuple[int, str]]:
    preset = hf.to_preset(config, "x")
    if "layers" not in preset:
        return [(preset["L"], preset["arch"])]
    return [(g["count"], g["arch"]) for g in preset["layers"]]


def refused(config: dict, *fragments: str) -> None:
    """Importing ``config`` fails in one line that names each of ``fragments``."""
    with pytest.raises(CostcalcError) as err:
        hf.to_preset(config, "x")
    message = str(err.value)
    assert "\n" not in message and all(f in message for f in fragments), message
