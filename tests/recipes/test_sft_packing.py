"""Packing (BFD, padding-free) as the SFT recipe runs it: positions restart per record and a packed batch
computes the same loss as its records run one by one, so nothing leaks across records; on a hybrid
linear-attention model (a tiny Qwen3.5) only where the linear-attention kernels take the records' boundaries, and
the recipe refuses packing where they cannot."""

import pytest
import torch
from conftest import chat_row
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl.data_utils import pack_dataset
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

import modeling.varlen_attention  # noqa: F401  (registers attn_implementation "varlen" and "varlen_sdpa")
from chat_corpus.masking import tokenize_chat, training_chat_template
from chat_corpus.records import normalize_chat


@pytest.fixture(scope="module")
def sequences(tokenizer):
    template = training_chat_template(tokenizer)
    rows = []
    for i, turns in enumerate([1, 3, 2, 4]):
        row = chat_row(i, n_turns=turns)
        input_ids, mask = tokenize_chat(tokenizer, template, normalize_chat(row["messages"]))
        rows.append({"input_ids": input_ids, "labels": [t if m else -100 for t, m in zip(input_ids, mask)]})
    return rows


def packed_batch(sequences, tokenizer, max_length):
    packed = pack_dataset(Dataset.from_list(sequences), max_length, "bfd")
    collator = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)
    return packed, collator(list(packed))


def test_positions_restart_per_record(sequences, tokenizer):
    lengths = [len(s["input_ids"]) for s in sequences]
    packed, batch = packed_batch(sequences, tokenizer, max_length=sum(lengths))
    assert len(packed) == 1 and sorted(packed[0]["seq_lengths"]) == sorted(lengths)
    positions = batch["position_ids"][0].tolist()
    assert "attention_mask" not in batch
    starts = [i for i, p in enumerate(positions) if p == 0]
    bounds = starts + [len(positions)]
    assert [b - a for a, b in zip(bounds, bounds[1:])] == list(packed[0]["seq_lengths"])
    for a, b in zip(bounds, bounds[1:]):
        assert positions[a:b] == list(range(b - a))
    assert all(batch["labels"][0, start] == -100 for start in starts)  # no record predicts across a boundary


ATTENTION = ["sdpa", "varlen_sdpa", "varlen"]  # varlen on CPU: one SDPA call per record


def perturbed_model(path, attn_implementation="sdpa"):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation=attn_implementation).eval()
    with torch.no_grad():  # random init gives near-uniform logits; perturb so records differ measurably
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model


def _token_weighted_loss(model, sequences):
    total, count = 0.0, 0
    for seq in sequences:
        ids, labels = torch.tensor([seq["input_ids"]]), torch.tensor([seq["labels"]])
        n = int((labels[0, 1:] != -100).sum())
        total += model(input_ids=ids, labels=labels).loss.item() * n
        count += n
    return total / count


@pytest.mark.parametrize("attn_implementation", ATTENTION)
def test_packed_loss_equals_records_one_by_one(sequences, tokenizer, tiny_model_path, attn_implementation):
    model = perturbed_model(tiny_model_path, attn_implementation)
    _, batch = packed_batch(sequences, tokenizer, max_length=sum(len(s["input_ids"]) for s in sequences))
    with torch.no_grad():
        packed_loss = model(**batch, use_cache=False).loss.item()  # TRL's compute_loss passes use_cache=False
        one_by_one = _token_weighted_loss(model, sequences)
        # the control: the same packed row with positions that do not restart attends across records
        leaky = dict(batch, position_ids=torch.arange(batch["input_ids"].shape[1])[None])
        for key in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"):
            leaky.pop(key)
        leaky_loss = model(**leaky, use_cache=False).loss.item()
    assert packed_loss == pytest.approx(one_by_one, rel=1e-5, abs=1e-5)
    assert abs(leaky_loss - one_by_one) > 1e-3


@pytest.mark.parametrize("attn_implementation", ATTENTION)
def test_sft_trainer_packed_batch_loss_equals_records_one_by_one(sequences, tokenizer, tiny_model_path, tmp_path,
                                                                 attn_implementation):
    """The same through SFTTrainer as the recipe configures it: dataset preparation, collator, compute_loss."""
    from trl import SFTConfig, SFTTrainer

    model = perturbed_model(tiny_model_path, attn_implementation)
    masks = [{"input_ids": s["input_ids"], "assistant_masks": [int(l != -100) for l in s["labels"]]} for s in sequences]
    args = SFTConfig(output_dir=str(tmp_path), packing=True, packing_strategy="bfd", max_length=4096,
                     per_device_train_batch_size=len(sequences), use_cpu=True, bf16=False, report_to="none",
                     shuffle_dataset=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(masks), processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch).item()
        one_by_one = _token_weighted_loss(model, sequences)
    assert loss == pytest.approx(one_by_one, rel=1e-4)


def test_token_counts_of_padded_and_padding_free_batches(sequences, tokenizer):
    from trainers.token_accounting import TokenCounts

    lengths = [len(s["input_ids"]) for s in sequences]
    trained = sum(sum(l != -100 for l in s["labels"][1:]) for s in sequences)
    padded = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(sequences)
    counts = TokenCounts(tokenizer.pad_token_id)
    counts.add(padded)
    assert counts.totals() == {"trained_tokens": trained, "real_tokens": sum(lengths),
                               "padded_tokens": max(lengths) * len(lengths), "batches": 1,
                               "padding_efficiency": sum(lengths) / (max(lengths) * len(lengths))}
    _, free = packed_batch(sequences, tokenizer, max_length=sum(lengths))
    free_counts = TokenCounts(tokenizer.pad_token_id)
    free_counts.add(free)
    assert free_counts.totals()["real_tokens"] == sum(lengths) == free_counts.totals()["padded_tokens"]
    collator = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True,
                                               pad_to_multiple_of=64)
    multiple = TokenCounts(tokenizer.pad_token_id)
    multiple.add(collator(sequences))
    totals = multiple.totals()
    assert totals["real_tokens"] == sum(lengths) and totals["padded_tokens"] == -(-sum(lengths) // 64) * 64


# ------------------------------------------------------------------ hybrid linear attention (Qwen3.5 shape)

def tiny_hybrid(tokenizer, path=None):
    """A 4-layer Qwen3.5 text model (Gated DeltaNet, full attention, DeltaNet, full attention), random weights,
    perturbed like the Qwen3 one so that records differ measurably."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                               linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                               linear_conv_kernel_dim=4, full_attention_interval=2, tie_word_embeddings=True,
                               pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    if path is not None:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return model


def _segments(bounds, length):
    starts = [int(b) for b in bounds]
    return [(a, b) for a, b in zip(starts, starts[1:] + ([length] if starts[-1] != length else [])) if b > a]


def boundary_kernels_standing_in(monkeypatch):
    """Kernels that take the records' boundaries, as flash-linear-attention's and causal-conv1d's do on CUDA: each
    record through transformers' own PyTorch reference on its own (a test stand-in: those packages need a GPU)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

    conv, rule = modeling.causal_conv1d_fn.__wrapped__, modeling.torch_chunk_gated_delta_rule.__wrapped__
    seen = {"seq_idx": 0, "cu_seqlens": 0}

    def conv_by_record(hidden_states, weight, bias=None, activation=None, seq_idx=None, **kwargs):
        if seq_idx is None:
            return conv(hidden_states, weight, bias, activation)
        seen["seq_idx"] += 1
        starts = [0] + (seq_idx[0, 1:] != seq_idx[0, :-1]).nonzero().flatten().add(1).tolist()
        return torch.cat([conv(hidden_states[:, :, a:b], weight, bias, activation)
                          for a, b in _segments(starts, hidden_states.shape[-1])], dim=-1)

    def rule_by_record(query, key, value, g, beta, cu_seqlens=None, **kwargs):
        if cu_seqlens is None:
            return rule(query, key, value, g, beta, **kwargs)
        seen["cu_seqlens"] += 1
        pieces = [rule(query[:, a:b], key[:, a:b], value[:, a:b], g[:, a:b], beta[:, a:b], **kwargs)[0]
                  for a, b in _segments(cu_seqlens[:-1].tolist(), query.shape[1])]
        return torch.cat(pieces, dim=1), None

    monkeypatch.setattr(modeling, "causal_conv1d_fn", conv_by_record)
    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", rule_by_record)
    return seen


def test_packing_hybrid_linear_attention(sequences, tokenizer, monkeypatch):
    """On Gated DeltaNet layers a packed row leaks unless the kernels reset the recurrent state at every record's
    start: positions restarting (the full-attention layers' masks) are not enough. transformers' CPU fallback
    refuses the boundaries; kernels that take them give the records' own loss."""
    from common.errors import ConfigError
    from modeling.kernels import boundary_kernels, check_packing

    model = tiny_hybrid(tokenizer)
    _, batch = packed_batch(sequences, tokenizer, max_length=sum(len(s["input_ids"]) for s in sequences))
    assert "seq_idx" in batch and "cu_seq_lens_q" in batch  # TRL's collator passes the boundaries
    with torch.no_grad():
        one_by_one = _token_weighted_loss(model, sequences)
        # positions restart per record, but nothing tells the DeltaNet layers: their state carries over
        positions_only = {key: batch[key] for key in ("input_ids", "labels", "position_ids")}
        leaked = model(**positions_only, use_cache=False).loss.item()
        assert abs(leaked - one_by_one) > 1e-3
    if not all(boundary_kernels(model.config).values()):  # a CPU machine: the kernels need CUDA
        with torch.no_grad(), pytest.raises(ValueError, match="can't keep packed sequences apart"):
            model(**batch, use_cache=False)  # transformers' PyTorch fallback refuses the boundaries
        with pytest.raises(ConfigError, match=r"^packing: qwen3_5_text has 2 of 4 layers of linear attention.*"
                                              r"causal-conv1d and flash-linear-attention are not installed.*"
                                              r"set `packing: false`"):
            check_packing(model.config, packing=True)
    check_packing(model.config, packing=False)

    seen = boundary_kernels_standing_in(monkeypatch)
    with torch.no_grad():
        packed = model(**batch, use_cache=False).loss.item()
    assert seen["seq_idx"] == 2 and seen["cu_seqlens"] == 2  # both DeltaNet layers were given the boundaries
    assert packed == pytest.approx(one_by_one, rel=1e-5, abs=1e-5)
    check_packing(model.config, packing=True, kernels={"fla": True, "causal_conv1d": True})  # installed: allowed


def test_recipe_refuses_packing_on_a_hybrid_model_before_preparing_the_corpus(tokenizer, tmp_path):
    import sys

    from conftest import run

    tiny_hybrid(tokenizer, tmp_path / "hybrid")
    args = ["recipes/sft.py", "--model_name_or_path", str(tmp_path / "hybrid"), "--output_dir", str(tmp_path / "out"),
            "--report_to", "none", "--eval_suites", ""]
    refused = run([sys.executable, *args])
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1].startswith("error: packing: qwen3_5_text has 2 of 4 layers")
    assert "corpus cache" not in refused.stdout  # refused before any record was read


def test_the_27b_config_packs_only_where_the_linear_attention_kernels_are_installed():
    """configs/sft/qwen3.5-27b-terminal-universe.yaml packs Qwen3.5-27B (48 of its 64 layers Gated DeltaNet): the
    recipe's check refuses it unless flash-linear-attention and causal-conv1d are both installed."""
    import yaml
    from conftest import REPO
    from transformers import Qwen3_5TextConfig

    from common.errors import ConfigError
    from modeling.kernels import check_packing

    config = yaml.safe_load((REPO / "configs/sft/qwen3.5-27b-terminal-universe.yaml").read_text())
    assert config["packing"] is True and config["attn_implementation"] == "varlen"
    shape = Qwen3_5TextConfig(num_hidden_layers=64, full_attention_interval=4)  # the 27B's layer pattern
    with pytest.raises(ConfigError, match="has 48 of 64 layers of linear attention"):
        check_packing(shape, config["packing"], kernels={"fla": False, "causal_conv1d": True})
    check_packing(shape, config["packing"], kernels={"fla": True, "causal_conv1d": True})
