"""Counts what training actually computes: trained tokens, real tokens and padded positions per batch.
Runs in: the trainer's processes (training venv); `CountingSFTTrainer` is TRL's SFTTrainer with the counts.

Every micro-batch that reaches `training_step` is counted (not evaluation batches, nor those a resumed run skips);
padding efficiency is real / padded; counts are per process and `totals` sums them over processes.
"""

from __future__ import annotations

import time

from trl import SFTTrainer


class TokenCounts:
    def __init__(self, pad_token_id: int | None = None):
        self.pad_token_id = pad_token_id
        self.trained = self.real = self.padded = self.batches = 0
        self.first_step_at: float | None = None

    def add(self, batch) -> None:
        labels, input_ids = batch["labels"], batch["input_ids"]
        self.trained += int((labels[..., 1:] != -100).sum())  # positions whose next token is in the loss
        if "attention_mask" in batch:
            self.real += int(batch["attention_mask"].sum())
        else:  # padding-free: one row of concatenated records, padded at the end only (pad_to_multiple_of)
            pads = (input_ids[0] == self.pad_token_id) & (batch["position_ids"][0] == 0)
            tail = len(pads) - int(pads.logical_not().nonzero().max()) - 1 if not pads.all() else len(pads)
            self.real += input_ids.numel() - tail
        self.padded += input_ids.numel()
        self.batches += 1

    def totals(self, accelerator=None) -> dict:
        import torch

        counts = torch.tensor([self.trained, self.real, self.padded, self.batches], dtype=torch.float64)
        if accelerator is not None and accelerator.num_processes > 1:
            counts = accelerator.reduce(counts.to(accelerator.device), reduction="sum").cpu()
        trained, real, padded, batches = (int(value) for value in counts.tolist())
        return {"trained_tokens": trained, "real_tokens": real, "padded_tokens": padded, "batches": batches,
                "padding_efficiency": real / padded if padded else 1.0}


class CountingSFTTrainer(SFTTrainer):
    """SFTTrainer that counts the tokens of every training micro-batch in `self.token_counts`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_counts = TokenCounts(self.processing_class.pad_token_id)

    def training_step(self, model, inputs, *args, **kwargs):
        if self.token_counts.first_step_at is None:  # wall clock (time.time()) when the first micro-batch arrived
            self.token_counts.first_step_at = time.time()
        self.token_counts.add(inputs)
        return super().training_step(model, inputs, *args, **kwargs)
