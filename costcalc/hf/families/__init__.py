"""The layer lists, one mapper per family: what transformers 5.23's modelling code runs for a config.

Each mapper returns one dict per layer (``{"arch": ..., sizes}``), grouped by the layers they
build: ``dense`` (every layer full attention, a dense FFN), ``windows`` (sliding-window layers,
a dense FFN), ``moe`` (MoE layers, with MLA, windows or chunks where the family has them),
``linear`` (linear-attention mixers beside softmax attention), ``conv`` (Mamba-1 and short-convolution
mixers, beside attention or alone) and ``ssm`` (Mamba-2 state-space mixers, alone, beside or in
parallel with attention), ``sparse`` (MLA with a lightning indexer: DeepSeek Sparse Attention),
``heads`` (GQA with values of their own head dim or per-head output gates),
``gemma4`` (Gemma 4: sliding and full layers of their own head widths, values from the keys, experts
beside the MLP), ``nas`` (Llama-Nemotron NAS, remote code: per-layer widths and skipped blocks),
``frontier`` (MiniMax-M2 and the text decoders of Qwen3-VL) and
``v4`` (DeepSeek-V4's window, compressed and compressed sparse layers with hyper-connections);
``common`` has the rules they share. Where the current modelling code and older reference code
disagree, the current code is followed (docs/hf-import.md). Biases are never counted.
"""
from __future__ import annotations

from . import conv, dense, frontier, gemma4, heads, linear, moe, nas, sparse, ssm, v4, windows
from .common import Mapper

_MODULES = (dense, windows, moe, linear, conv, ssm, sparse, heads, gemma4, nas, v4, frontier)
MAPPERS: dict[str, Mapper] = {family: mapper for module in _MODULES for family, mapper in module.MAPPERS.items()}
assert len(MAPPERS) == sum(len(m.MAPPERS) for m in _MODULES), "a family mapped twice"
# The dtype a family's mixers keep their recurrent state in, where it is not the model's (preset ``state_dtype``).
# The decoder block of a family's MTP module where it is not the model's last layer's (hf.MTP_KEYS).
MTP_LAYERS = {**heads.MTP_LAYERS, **windows.MTP_LAYERS}
STATE_DTYPES: dict[str, str] = {**linear.STATE_DTYPE, **conv.STATE_DTYPES, **ssm.STATE_DTYPES}
