"""The training glue the recipes call: configs, agentic GRPO wiring, the eval-on-save callback, summaries, token counts.
Runs in: the training venv (.venv, Python >= 3.11: torch, TRL, Transformers, Accelerate, DeepSpeed, PEFT); only the
recipes, bench, launchers and tests import it.
"""
