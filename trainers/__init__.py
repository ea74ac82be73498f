"""The training glue the recipes call: recipe configs, the agentic GRPO wiring (task rows, episodes as TRL
environments, the tests' reward), the eval-on-save callback, run summaries, token accounting, `python -m trainers.data`.
Runs in the training venv (.venv, Python >= 3.11: torch, TRL, Transformers, Accelerate, DeepSpeed, PEFT); nothing
below the recipes, bench and launchers imports it.
"""
