"""What a frontier family's import refuses in one line, held to what transformers 5.23 builds: the
module the line names exists, with the shape it gives, on a small config on the meta device
(docs/hf-import.md, "MiniMax-M3"). MiniMax-M3's full-attention layers import (tests/test_hf_transformers.py)."""
import pytest

pytest.importorskip("transformers")

from costcalc import hf  # noqa: E402
from costcalc.errors import CostcalcError  # noqa: E402

SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=128, num_hidden_layers=2,
             intermediate_size=96, moe_intermediate_size=32, num_experts_per_tok=2)


def _build(module, config_class, model_class, **fields):
    import importlib

    import torch

    mod = importlib.import_module(f"transformers.models.{module}")
    with torch.device("meta"):
        return getattr(mod, model_class)(getattr(mod, config_class)(**fields))


def test_minimax_m3_builds_a_lightning_indexer_over_gqa_on_its_sparse_layers():
    sparse_types = ["full_attention", "minimax_m3_sparse"]
    model = _build("minimax_m3_vl", "MiniMaxM3VLTextConfig", "MiniMaxM3VLTextModel", **SMALL, head_dim=16,
                   num_local_experts=4, index_n_heads=2, index_head_dim=8,
                   layer_types=sparse_types)
    full, sparse = (layer.self_attn for layer in model.layers)
    assert full.indexer is None
    assert (sparse.indexer.q_proj.out_features, sparse.indexer.k_proj.out_features) == (2 * 8, 8)
    assert sparse.k_proj.out_features == 2 * 16          # GQA keys, not an MLA latent
    text = dict({k: v for k, v in SMALL.items() if k != "moe_intermediate_size"}, head_dim=16, num_local_experts=4, shared_intermediate_size=32, dense_intermediate_size=96,
                index_n_heads=2, index_head_dim=8)
    told = "layer 1 is a minimax_m3_sparse layer: GQA with a lightning indexer"
    with pytest.raises(CostcalcError, match=told):
        hf.to_preset({"model_type": "minimax_m3_vl", "text_config": dict(text, layer_types=sparse_types)}, "x")
    with pytest.raises(CostcalcError, match=told):      # the published spelling: sparse_attention_config
        hf.to_preset({"model_type": "minimax_m3_vl_text", **text, "sparse_attention_config":
                      {"sparse_attention_freq": [0, 1]}}, "x")
