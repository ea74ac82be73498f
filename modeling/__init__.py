"""The model side: the embedded tiny Qwen3 and its tokenizer (tiny_model), attention kernels and packing checks
(kernels, varlen_attention), the FLOPs behind MFU (flops). Runs in the training venv (.venv: torch, Transformers);
the recipes, the CPU serving of eval and the benchmarks import it.
"""
