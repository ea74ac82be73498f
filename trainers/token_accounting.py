"""Counts what the trainer actually computes: trained tokens, real tokens and padded positions per batch.

Wraps the trainer's collator (no Trainer hook sees the batches). Padding efficiency is real / padded.
Counts are per process; `totals` sums them over processes. Batches built in DataLoader worker processes
(`dataloader_num_workers > 0`) are not seen by this process's counters.
"""

from __future__ import annotations


class CountingCollator:
    """`counting()` tells whether a batch is for training (the trainer's model in train mode) or evaluation."""

    def __init__(self, collator, counting=lambda: True):
        self.collator = collator
        self.counting = counting
        self.trained = self.real = self.padded = self.batches = 0

    def __call__(self, examples):
        batch = self.collator(examples)
        if not self.counting():
            return batch
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
