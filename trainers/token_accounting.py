"""Counts what training actually computes: trained tokens, real tokens and padded positions per batch.

`CountingSFTTrainer` wraps the collator of the training dataloader only (no Trainer hook sees batches;
evaluation batches are not counted). Padding efficiency is real / padded. Counts are per process; `totals`
sums them over processes. Batches built in DataLoader worker processes (`dataloader_num_workers > 0`) are
not seen by this process's counters.
"""

from __future__ import annotations

from trl import SFTTrainer


class CountingCollator:
    def __init__(self, collator):
        self.collator = collator
        self.trained = self.real = self.padded = self.batches = 0

    def __call__(self, examples):
        batch = self.collator(examples)
        labels = batch["labels"]
        self.trained += int((labels[..., 1:] != -100).sum())  # positions whose next token is in the loss
        if "attention_mask" in batch:
            self.real += int(batch["attention_mask"].sum())
        else:  # padding-free: one row of concatenated sequences, padded only to a multiple
            self.real += sum(len(example["input_ids"]) for example in examples)
        self.padded += batch["input_ids"].numel()
        self.batches += 1
        return batch

    def totals(self, accelerator=None) -> dict:
        import torch

        counts = torch.tensor([self.trained, self.real, self.padded, self.batches], dtype=torch.float64)
        if accelerator is not None and accelerator.num_processes > 1:
            counts = accelerator.reduce(counts.to(accelerator.device), reduction="sum").cpu()
        trained, real, padded, batches = (int(value) for value in counts.tolist())
        return {"trained_tokens": trained, "real_tokens": real, "padded_tokens": padded, "batches": batches,
                "padding_efficiency": real / padded if padded else 1.0}


class CountingSFTTrainer(SFTTrainer):
    """SFTTrainer whose training batches pass through a `CountingCollator` (`self.token_counts`)."""

    def get_train_dataloader(self):
        collator = self.data_collator
        self.token_counts = CountingCollator(collator)
        self.data_collator = self.token_counts
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = collator
