"""The model side: the embedded tiny Qwen3 (tiny_model), attention kernels and packing checks, the FLOPs behind MFU.
Runs in: the training venv (.venv: torch, Transformers); the recipes, eval's CPU serving and the benchmarks import it.
"""
