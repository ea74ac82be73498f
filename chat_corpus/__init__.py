"""Chat corpora for SFT and GRPO prompts: loaders by format (sources), record validation (records), assistant-only
loss masks (masking), mixtures and splits (mixture), the tokenized corpus (sft_corpus) and its cache (cache),
decontamination against eval suites, Harbor trajectories as chats, GRPO prompt rows (grpo_prompts).
Runs in the training venv (.venv, Python >= 3.11: datasets, Transformers' tokenizers); no torch model, no trainer.
"""
