"""Chat corpora for SFT and GRPO prompts: loaders, validation, loss masks, mixtures, the tokenized corpus and its cache.
Runs in: the training venv (.venv, Python >= 3.11: datasets, Transformers' tokenizers); no torch model, no trainer.

Modules: sources, records, masking, mixture, sft_corpus, cache, decontaminate, harbor_trajectory, grpo_prompts,
pivots (terminal-pivot rows from Harbor Terminus-2 jobs).
"""
