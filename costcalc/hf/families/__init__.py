"""The layer lists, one mapper per family: what transformers 5.23's modelling code runs for a config.

Each mapper returns one dict per layer (``{"arch": ..., sizes}``), grouped by the layers they
build: ``dense`` (every layer full attention, a dense FFN), ``windows`` (sliding-window layers,
a dense FFN), ``moe`` (MoE layers, with MLA, windows or chunks where the family has them) and ``linear``
(linear-attention mixers beside softmax attention);
``common`` has the rules they share. Where the current modelling code and older reference code
disagree, the current code is followed (docs/hf-import.md). Biases are never counted.
"""
from __future__ import annotations

from . import dense, linear, moe, windows
from .common import Mapper

MAPPERS: dict[str, Mapper] = {**dense.MAPPERS, **windows.MAPPERS, **moe.MAPPERS, **linear.MAPPERS}
assert len(MAPPERS) == len(dense.MAPPERS) + len(windows.MAPPERS) + len(moe.MAPPERS) + len(linear.MAPPERS), \
    "a family mapped twice"
STATE_DTYPE = linear.STATE_DTYPE
