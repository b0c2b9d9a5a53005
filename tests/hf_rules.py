"""What the config-import tests share: the real configs' folder, a small base config, and the
layer kinds a config imports as."""
from pathlib import Path

from costcalc import hf

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128)


def kinds(config: dict) -> list[tuple[int, str]]:
    preset = hf.to_preset(config, "x")
    if "layers" not in preset:
        return [(preset["L"], preset["arch"])]
    return [(g["count"], g["arch"]) for g in preset["layers"]]
