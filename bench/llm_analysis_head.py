"""The llm-analysis HEAD anchors of tests/test_compare.py, printed by the tool's own code.

cli99/llm-analysis at HEAD, commit d841e40aec8c84b9e76ba9cfbce67418adb172bd (2024-11-13), run
unchanged: ``LLMAnalysis.get_num_flops_fwd_total(batch, seq)`` for the models as llm-analysis
config files describe them (``mlp_gated_linear_units`` true: the models' MLPs are gated, as the
tool's own ``upstage_Llama-2-70b-instruct-v2.json`` says it). Its command-line module ``fire``
is not needed for this call and is stubbed when missing.

    git clone https://github.com/cli99/llm-analysis && git -C llm-analysis checkout d841e40
    python bench/llm_analysis_head.py llm-analysis

Printed (2026-12-01): llama-3.1-8b prefill 8192 158140695838720, decode step 15009841152;
llama-2-7b prefill 1024 14081050279936, 4096 62921270886400 (no AssertionError).
"""
import sys
import types

MODELS = {
    "llama-3.1-8b": dict(num_layers=32, n_head=32, hidden_dim=4096, vocab_size=128256, num_key_value_heads=8,
                         ffn_embed_dim=14336, mlp_gated_linear_units=True),
    "llama-2-7b": dict(num_layers=32, n_head=32, hidden_dim=4096, vocab_size=32000, num_key_value_heads=32,
                       ffn_embed_dim=11008, mlp_gated_linear_units=True),
}
CASES = [("llama-3.1-8b", "prefill", 8192), ("llama-3.1-8b", "decode step", 1), ("llama-2-7b", "prefill", 1024),
         ("llama-2-7b", "prefill", 4096)]


def main(checkout: str) -> None:
    sys.path.insert(0, checkout)
    try:
        import fire  # noqa: F401
    except ImportError:
        sys.modules["fire"] = types.SimpleNamespace(Fire=lambda *a, **k: None)
    from llm_analysis.analysis import LLMAnalysis
    from llm_analysis.config import ModelConfig, get_gpu_config_by_name

    gpu = get_gpu_config_by_name("a100-sxm-80gb")    # FLOPs do not depend on it
    for name, workload, seq in CASES:
        tool = LLMAnalysis(ModelConfig(name=name, **MODELS[name]), gpu)
        print(name, workload, seq, int(tool.get_num_flops_fwd_total(1, seq)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "llm-analysis")
