"""Weight formats: the exact bytes a checkpoint stores for one ``fan_in x fan_out`` matrix.

A format is named once (the name is the preset key ``dtypes``' value, the ``--weight-dtype``
choice and the ``weight_dtype`` column alike) and says how many bytes each tensor of one matrix
takes, by the format's own tensor shapes (ceil where a block or group does not divide). Sources,
read for these rules (docs/hf-import.md, "Weight formats", has the table):

- ``bf16``, ``fp16``, ``fp32``, ``fp64``: the elements, unquantized.
- ``fp8``, ``int8``, ``int4``: costcalc's generic rates (no checkpoint format): one element of
  8/8/4 bits, the integer ones with an fp16 scale per ``group_size`` weights as a fractional
  rate (``--group-size``), as before these formats existed.
- ``fp8-tensor``: e4m3 weight ``[out, in]`` and one fp32 ``weight_scale_inv`` per matrix
  (transformers ``integrations/finegrained_fp8.py`` ``FP8Linear`` with ``block_size=None``).
- ``fp8-block{B}`` / ``fp8-block{O}x{I}`` (``quant_method: fp8`` with ``weight_block_size``, DeepSeek-V3):
  e4m3 weight ``[out, in]`` and fp32 ``weight_scale_inv`` ``[ceil(out/O), ceil(in/I)]``
  (``FP8Linear``); the suffix ``-ue8m0`` (``scale_fmt: ue8m0``) stores the scales in one byte.
- ``nvfp4`` (ModelOpt ``quant_algo: NVFP4``): packed e2m1 ``weight`` uint8 ``[out, ceil(in/2)]``,
  e4m3 ``weight_scale`` ``[out, ceil(in/16)]``, fp32 ``weight_scale_2`` and ``input_scale``
  (one each per matrix; vLLM ``quantization/modelopt.py``, ModelOpt's unified HF export).
- ``mxfp4`` (gpt-oss ``quant_method: mxfp4``): ``*_blocks`` uint8 ``[out, ceil(in/32), 16]``
  (two e2m1 per byte) and ``*_scales`` e8m0 uint8 ``[out, ceil(in/32)]`` (transformers
  ``integrations/mxfp4.py``: ``Mxfp4Deserialize``, ``_convert_moe_packed_tensors``).
- ``fp4-block1x32`` (``quant_method: fp8`` with ``expert_dtype: fp4``, DeepSeek-V4's routed experts):
  packed e2m1 ``weight`` int8 ``[out, in/2]`` and one scale per row per 32 inputs
  ``weight_scale_inv`` ``[out, ceil(in/32)]``, fp32, or one byte with ``-ue8m0`` (transformers
  ``integrations/finegrained_fp8.py``: ``FP8Experts`` with ``expert_dtype="fp4"``,
  ``_alloc_expert_proj``; its ``min_sf_out=2`` floor on the fused gate_up's scale rows never binds,
  one row per output). Not ``mxfp4``'s layout: no padding of a row to whole 32-blocks (the same bytes
  only where 32 divides ``in`` and the scales are ue8m0). Two inputs a byte: transformers allocates
  ``in // 2``, which holds an even ``in`` (every checkpoint's); costcalc counts ``ceil(in/2)``.
- ``gptq-int{b}-g{G}`` (``-gchannel``: ``group_size: -1``): ``qweight`` int32
  ``[ceil(in b/32), out]``, ``qzeros`` int32 ``[groups, ceil(out b/32)]``, ``scales`` fp16
  ``[groups, out]``, ``g_idx`` int32 ``[in]`` (groups = ceil(in/G); AutoGPTQ / GPTQModel
  ``QuantLinear``, vLLM ``quantization/gptq.py``). ``sym`` and ``desc_act`` change the values,
  not the tensors (qzeros and g_idx are stored either way).
- ``awq-int4-g{G}`` (AutoAWQ ``version: gemm``): ``qweight`` int32 ``[in, ceil(out/8)]``,
  ``qzeros`` int32 ``[ceil(in/G), ceil(out/8)]``, ``scales`` fp16 ``[ceil(in/G), out]`` (vLLM
  ``quantization/awq.py``).
- ``ct-int{b}-g{G}`` (compressed-tensors ``pack-quantized``, symmetric, ``strategy: group``; Kimi-K2-Thinking):
  ``weight_packed`` int32 ``[out, ceil(in b/32)]``, ``weight_scale`` bf16 ``[out, ceil(in/G)]``,
  ``weight_shape`` int64 ``[2]``; ``-asym`` adds ``weight_zero_point`` int32
  ``[ceil(out b/32), ceil(in/G)]`` (compressed-tensors ``compressors/quantized_compressors/pack_quantized.py``,
  vLLM ``compressed_tensors_wNa16.py``).

``--group-size`` belongs to the generic ``int8``/``int4`` only; a checkpoint format carries its own.
No sympy and no torch here: exact integers and Fractions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .errors import CostcalcError, quote

PLAIN = {"fp64": 64, "fp32": 32, "bf16": 16, "fp16": 16}        # unquantized: bits per element
GENERIC = {"fp8": 8, "int8": 8, "int4": 4}                       # costcalc's generic rates
SCALE_BITS = 16          # the generic integer formats' fp16 scale per group
DEFAULT = "bf16"         # a matrix no format names: the checkpoint dtype of an unquantized model


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Format:
    """One weight format, parsed from its name (``parse``)."""
    name: str
    kind: str                 # plain | generic | fp8-tensor | fp8-block | nvfp4 | mxfp4 | fp4-block | gptq | awq | ct
    bits: int = 16            # the weight element's bits (plain, generic, packed integer)
    block: tuple[int, int] = (0, 0)   # fp8-block, fp4-block: (out, in) per scale
    group: int = 0            # gptq/awq/ct: inputs per scale (0: one group, a whole column)
    scale_bytes: int = 4      # fp8-block, fp4-block: 4 (fp32) or 1 (ue8m0)
    asym: bool = False        # ct: a packed zero point per group

    @property
    def exact(self) -> bool:
        """A checkpoint format: its bytes are whole per matrix (not a rate per element)."""
        return self.kind not in ("plain", "generic")

    def bytes(self, fan_in: int, fan_out: int, group_size: int = 128) -> Fraction:
        """Bytes stored for one matrix of ``fan_in`` inputs and ``fan_out`` outputs."""
        i, o = fan_in, fan_out
        if self.kind == "plain":
            return Fraction(i * o * self.bits, 8)
        if self.kind == "generic":
            extra = Fraction(SCALE_BITS, group_size) if self.name in ("int8", "int4") else 0
            return i * o * (self.bits + extra) / 8
        if self.kind == "fp8-tensor":
            return Fraction(i * o + 4)
        if self.kind == "fp8-block":
            bo, bi = self.block
            return Fraction(i * o + _cdiv(o, bo) * _cdiv(i, bi) * self.scale_bytes)
        if self.kind == "nvfp4":
            return Fraction(o * _cdiv(i, 2) + o * _cdiv(i, 16) + 4 + 4)
        if self.kind == "mxfp4":
            return Fraction(o * _cdiv(i, 32) * 16 + o * _cdiv(i, 32))
        if self.kind == "fp4-block":
            bo, bi = self.block
            return Fraction(o * _cdiv(i, 2) + _cdiv(o, bo) * _cdiv(i, bi) * self.scale_bytes)
        groups = _cdiv(i, self.group) if self.group else 1
        per_int = 32 // self.bits
        if self.kind == "gptq":
            return Fraction(4 * _cdiv(i, per_int) * o + 4 * groups * _cdiv(o, per_int) + 2 * groups * o + 4 * i)
        if self.kind == "awq":
            return Fraction(4 * i * _cdiv(o, per_int) + 4 * groups * _cdiv(o, per_int) + 2 * groups * o)
        if self.kind == "ct":
            zeros = 4 * _cdiv(o, per_int) * groups if self.asym else 0
            return Fraction(4 * o * _cdiv(i, per_int) + 2 * o * groups + 16 + zeros)   # weight_shape: two int64
        raise AssertionError(self.kind)


_PATTERNS = (
    (re.compile(r"fp8-tensor"), lambda m: dict(kind="fp8-tensor", bits=8)),
    (re.compile(r"fp8-block([1-9][0-9]*)(?:x([1-9][0-9]*))?(-ue8m0)?"),
     lambda m: dict(kind="fp8-block", bits=8, block=(int(m[1]), int(m[2] or m[1])), scale_bytes=1 if m[3] else 4)),
    (re.compile(r"nvfp4"), lambda m: dict(kind="nvfp4", bits=4)),
    (re.compile(r"mxfp4"), lambda m: dict(kind="mxfp4", bits=4)),
    (re.compile(r"fp4-block1x32(-ue8m0)?"),        # the one granularity FP8Experts' fp4 stores
     lambda m: dict(kind="fp4-block", bits=4, block=(1, 32), scale_bytes=1 if m[1] else 4)),
    (re.compile(r"gptq-int([48])-g([1-9][0-9]*|channel)"), lambda m: dict(kind="gptq", bits=int(m[1]), group=_group(m[2]))),
    (re.compile(r"awq-int4-g([1-9][0-9]*)"), lambda m: dict(kind="awq", bits=4, group=int(m[1]))),
    (re.compile(r"ct-int([48])-g([1-9][0-9]*|channel)(-asym)?"),
     lambda m: dict(kind="ct", bits=int(m[1]), group=_group(m[2]), asym=bool(m[3]))),
)
EXAMPLES = "bf16, fp16, fp32, fp8, int8, int4, fp8-tensor, fp8-block128, nvfp4, mxfp4, fp4-block1x32-ue8m0, gptq-int4-g128, awq-int4-g128, ct-int4-g32"


def _group(text: str) -> int:
    return 0 if text == "channel" else int(text)


def parse(name: object, what: str = "weight dtype") -> Format:
    """A format by its name; anything else is one error naming the formats."""
    text = getattr(name, "value", name)
    if isinstance(text, str):
        if text in PLAIN:
            return Format(text, "plain", PLAIN[text])
        if text in GENERIC:
            return Format(text, "generic", GENERIC[text])
        for pattern, fields in _PATTERNS:
            m = pattern.fullmatch(text)
            if m:
                got = Format(text, **fields(m))
                if max(got.block + (got.group,)) <= 2**40:     # a block or group of 10^200 is a typo
                    return got
                break
    raise CostcalcError(f"{what} must be a weight format ({EXAMPLES}; docs/hf-import.md), got {quote(text)}")


# --- a model's formats by module ---------------------------------------------------------------------

# The selectors a ``dtypes`` mapping takes: ``default`` (every matrix no other key names), a term
# (``attn_proj``, ``experts``, ...), an operator (``q_proj``, ``experts.down_proj``, ``indexer.weights_proj``),
# ``lm_head`` or ``embedding`` (the lookup table: no matmul, resident bytes only).
EMBEDDING = "embedding"


def resolve(dtypes: dict, op: str, term: str) -> str:
    """The format name of operator ``op`` (charged to ``term``) under a model's ``dtypes``:
    the operator's own key, else its term's, else ``default``, else bf16."""
    for key in (op, term, "default"):
        if key in dtypes:
            return dtypes[key]
    return DEFAULT


def summary(dtypes: dict) -> str:
    """A model's formats in one cell, without a comma (a CSV cell that ``cut -d,`` keeps whole): the
    default, then each other format with its selectors (``fp8-block128; bf16: router lm_head embedding``)."""
    base = dtypes.get("default", DEFAULT)
    others: dict[str, list[str]] = {}
    for key, value in dtypes.items():
        if key != "default" and value != base:
            others.setdefault(value, []).append(key)
    return "; ".join([base] + [f"{fmt}: {' '.join(keys)}" for fmt, keys in others.items()])


SLICES = {"q_absorb": "kv_b_proj", "v_absorb": "kv_b_proj"}   # MLA absorbed: slices of kv_b_proj, in its format
