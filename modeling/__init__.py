"""The model side: tiny models of each family (tiny_model, tiny_families), kernels and packing checks, MFU's FLOPs.
Runs in: the training venv (.venv: torch, Transformers); the recipes, eval's CPU serving and the benchmarks import it.
"""
