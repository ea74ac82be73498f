"""GRPO of a terminal agent against a NeMo Gym compatible reward server.

    accelerate launch [--config_file configs/accelerate/X.yaml] recipes/grpo.py [--config configs/grpo/X.yaml]
        [--reward_url http://host:port[,http://host2:port]] [--key value ...]

With no --config it runs the embedded default (configs/grpo/tiny.yaml): the tiny Qwen3, terminal-pivot rows from
data/, generation by Transformers on CPU, W&B offline. With no reward_url a reward server is started on loopback
for the run and stopped after it. Rows the server masks or cannot score stay out of the advantage and are
counted; prompts longer than max_prompt_length are filtered before training and counted.
"""

import time
from contextlib import nullcontext
from pathlib import Path

from accelerate import PartialState
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config

from chat_corpus.grpo_prompts import build_grpo_prompts
from chat_corpus.sft_corpus import CorpusArguments
from common.build_locks import clear_stale_build_locks
from common.checkpoints import last_complete_checkpoint
from modeling.tiny_model import resolve_model
from rewards.client import RewardArguments, RewardClient, make_reward_function, policy_family
from rewards.local import local_reward_server
from trainers.eval_callback import EvalArguments, EvalOnSaveCallback
from trainers.recipe_config import exit_on_user_error, parse_config
from trainers.summary import build_grpo_summary, print_grpo_summary, write_summary

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo" / "tiny.yaml"


@exit_on_user_error
def main():
    corpus_args, reward_args, training_args, model_args, eval_args = parse_config(
        (CorpusArguments, RewardArguments, GRPOConfig, ModelConfig, EvalArguments), DEFAULT_CONFIG)
    state = PartialState()
    clear_stale_build_locks()  # a run killed while DeepSpeed built an op left its lock: every start would wait on it

    with state.main_process_first():
        model_path = resolve_model(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision, padding_side="left")
    prompts = build_grpo_prompts(
        corpus_args, tokenizer, reward_args.max_prompt_length, reward_args.reward_environment,
        training_args.chat_template_kwargs)

    urls = reward_args.reward_url.split(",") if reward_args.reward_url else None
    server = nullcontext(urls) if urls else local_reward_server(reward_args.reward_server_config)
    with server as served:
        client = RewardClient(reward_args.client_config(served if urls else [served]))
        training_args.model_init_kwargs = {"revision": model_args.model_revision, "dtype": model_args.dtype,
                                           "attn_implementation": model_args.attn_implementation,
                                           **(training_args.model_init_kwargs or {})}
        reward = make_reward_function(client, policy_family(tokenizer))  # the policy's reasoning as its own item
        # step 0 (eval_on_start: checkpoint-0 scored like every save) is the callback's; the Trainer's own computes an
        # eval reward first, which needs an eval split (eval_fraction > 0)
        eval_on_start = training_args.eval_on_start
        if prompts.eval is None:
            training_args.eval_on_start = False
        trainer = GRPOTrainer(model=model_path, reward_funcs=[reward], args=training_args,
                              train_dataset=prompts.train, eval_dataset=prompts.eval, processing_class=tokenizer,
                              peft_config=get_peft_config(model_args),
                              callbacks=[EvalOnSaveCallback(eval_args, eval_on_start=eval_on_start)]
                              if eval_args.eval_suites else None)
        resume = training_args.resume_from_checkpoint or last_complete_checkpoint(training_args.output_dir)
        started = time.monotonic()
        trainer.train(resume_from_checkpoint=resume)
        trainer.save_model()

    summary = build_grpo_summary(trainer, prompts, client.counts, time.monotonic() - started, resume,
                                 served if urls else [served])
    if trainer.is_world_process_zero():
        print_grpo_summary(summary)
        write_summary(summary)
    trainer.end()


if __name__ == "__main__":
    main()
