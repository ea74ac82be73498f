"""The deep learning run's student (modeling/tiny_model.py --preset student-induction): an induction circuit set by
hand (modeling/induction_circuit.py) copies a span back from any distance before any training, and it is the
circuit that does it: without layer 1's keys (the match on the previous token) or layer 0's output (the previous
token itself) it copies nothing. Its pointer heads copy whatever they look at; where they look, SFT learns. The
copy-pretrained student's one-distance copy: tests/modeling/test_tiny_model.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import learn_recipe

REPO = Path(__file__).resolve().parents[2]
CORPUS = ["data/sft/terminus2_conversations.jsonl", "data/sft/terminus2_chat.jsonl"]


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    out = tmp_path_factory.mktemp("reader") / "model"
    run = subprocess.run([sys.executable, "-m", "modeling.tiny_model", "--out", str(out), "--corpus", *CORPUS,
                          "--preset", "student-induction"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return out, run.stdout


def _far_accuracy(model, tokenizer, length=384, seed=3):
    import torch

    from modeling.tiny_model import _word_ids, copy_accuracy, far_copy_batch

    return copy_accuracy(model, *far_copy_batch(_word_ids(tokenizer), 24, length, torch.Generator().manual_seed(seed)))


def test_the_student_copies_from_any_distance_before_training(reader):
    out, stdout = reader
    record = json.loads((out / "copy_pretraining.json").read_text())
    assert record["induction_circuit"] is True and record["steps"] == 0
    # measured 0.90; 0.67 when the query weighted its last two tokens alike (modeling/induction_circuit.py)
    assert record["copy_accuracy_any_distance"] >= 0.8, record
    assert "an induction circuit set by hand" in stdout and "at random distances" in stdout
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"]["rope_theta"] == 1_000_000.0  # Qwen3's own


def test_the_circuit_does_the_copying(reader):
    """The same saved model, reloaded (the circuit is in the weights, nothing at load time), copies; with either half
    of the circuit cut it copies nothing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = reader
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert _far_accuracy(model, tokenizer) >= 0.5
    for cut in (lambda m: m.model.layers[1].self_attn.k_proj.weight, lambda m: m.model.layers[0].self_attn.o_proj.weight):
        model = AutoModelForCausalLM.from_pretrained(out)
        with torch.no_grad():
            cut(model).zero_()
        assert _far_accuracy(model, tokenizer) <= 0.05


def test_the_pointer_heads_copy_what_they_look_at_and_learn_where(reader):
    """The last layer's pointer heads: what a head writes is the token it looks at (the value's logit, through the
    tied LM head), set by hand; where it looks is random, for training to set. The layer's other heads write
    nothing yet."""
    import torch
    from transformers import AutoModelForCausalLM

    out, _ = reader
    assert json.loads((out / "copy_pretraining.json").read_text())["pointer_heads"] == 2
    model = AutoModelForCausalLM.from_pretrained(out)
    config, attention = model.config, model.model.layers[-1].self_attn
    head_dim, per_group = config.head_dim, config.num_attention_heads // config.num_key_value_heads
    embeddings = model.model.embed_tokens.weight.detach()
    tokens = torch.arange(3, embeddings.shape[0])
    with torch.no_grad():
        written = torch.zeros(len(tokens), config.hidden_size)
        for g in range(2):
            values = embeddings[tokens] @ attention.v_proj.weight[g * head_dim:(g + 1) * head_dim].T
            for h in range(g * per_group, (g + 1) * per_group):  # every query head of the group looking at j
                written += values @ attention.o_proj.weight[:, h * head_dim:(h + 1) * head_dim].T
        copied = (model.lm_head(written).argmax(-1) == tokens).float().mean().item()
        free = attention.o_proj.weight[:, 2 * per_group * head_dim:]
    assert copied >= 0.95, copied
    assert free.abs().max() == 0
    assert attention.q_proj.weight[:2 * per_group * head_dim].std() > 0.01  # random, not set: learned in SFT


def test_a_model_the_circuit_cannot_fit_is_refused():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from modeling.induction_circuit import set_induction_circuit

    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=32))
    with pytest.raises(ValueError, match="needs >= 2 layers"):
        set_induction_circuit(model)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=32))
    with pytest.raises(ValueError, match="pointer heads need a third layer"):
        set_induction_circuit(model, pointer_groups=2)


def test_the_learning_run_picks_the_reader_for_deep_families():
    learn = learn_recipe()
    assert learn.parse_args([]).student == "student"
    assert learn.parse_args(["--families", "deep"]).student == "student-induction"
    assert learn.parse_args(["--families", "deep", "--student", "student"]).student == "student"
    run = subprocess.run([sys.executable, "recipes/learn.py", "--student", "nope"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "--student nope: not a preset" in run.stderr and "student-induction" in run.stderr


def test_it_matches_on_two_tokens(reader):
    """`x a b ... y a c ... x a` -> `b`, whichever of the two comes first: the token before the match decides, as a
    path's `archive/` decides which `/` to continue from."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from modeling.tiny_model import _word_ids

    out, _ = reader
    tokenizer, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    words, generator = _word_ids(tokenizer), torch.Generator().manual_seed(7)
    right = 0
    for row in range(40):
        ids = words[torch.randint(len(words), (200,), generator=generator)]
        x, y, a, b, c = words[torch.randperm(len(words), generator=generator)[:5]]
        first, second = (30, 110) if row % 2 else (110, 30)
        ids[first:first + 3] = torch.stack([x, a, b])
        ids[second:second + 3] = torch.stack([y, a, c])
        ids[-2:] = torch.stack([x, a])
        with torch.no_grad():
            right += int(model(input_ids=ids[None]).logits[0, -1].argmax() == b)
    assert right >= 32, right  # measured 40 (34 with both tokens weighted alike); a one-token match (the first
    # construction) picked b 20 times, c 18


def test_the_student_is_served_with_the_template_it_is_trained_with(reader):
    """TRL trains on the student's template as it is (it already is Qwen3's prefix-preserving training twin), and the
    prompt a server renders for the next turn is the start of what training rendered: earlier turns keep their empty
    think blocks. Qwen3's own template (the embedded default's) drops them from earlier turns, which the student
    never saw in training."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    from common.model_families import trl_template_dir

    tokenizer = AutoTokenizer.from_pretrained(reader[0])
    assert get_training_chat_template(tokenizer) is None
    turns = [{"role": "user", "content": "task"}, {"role": "assistant", "content": '{"commands": []}'},
             {"role": "user", "content": "New Terminal Output:\n$ ls"}, {"role": "assistant", "content": "{}"}]
    trained = tokenizer.apply_chat_template(turns, tokenize=False)
    assert trained.count("<think>\n\n</think>") == 2
    assert trained.startswith(tokenizer.apply_chat_template(turns[:3], tokenize=False, add_generation_prompt=True))
    original = (trl_template_dir() / "qwen3.jinja").read_text(encoding="utf-8")
    served = tokenizer.apply_chat_template(turns[:3], tokenize=False, add_generation_prompt=True, chat_template=original)
    assert not trained.startswith(served)
