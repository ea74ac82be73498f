"""What the recipes (recipes/sft.py, recipes/grpo.py) call: corpus loading and validation, loss masks, mixtures,
the tiny model, the /verify reward client, the eval-on-save callback, run summaries, the `python -m trainers.data`
CLI.

Runs in the training venv (.venv, Python >= 3.11: torch, TRL, Transformers, Accelerate, DeepSpeed, PEFT).
"""
