"""Agentic GRPO: the policy acts in a sandbox for many turns and the task's own tests are the reward.

    accelerate launch recipes/grpo_agentic.py [--config configs/grpo/agentic-tiny.yaml] [--key value ...]

Each rollout is an episode: the task's instruction as the prompt, the policy's actions run in a fresh local sandbox
of the task, and the task's tests/test.sh as the reward. `harness: bash-tool` (the default): `bash` tool calls
(episodes/local.py, driven from this process: no Harbor, no server in between; or, with `sandbox_urls`, on episode
servers: episodes/remote.py), tool output fed back and never trained (TRL's tool_mask). `harness: terminus-2`
(`--harness terminus-2`): Terminus-2's JSON actions typed into tmux, its screens fed back and never trained
(episodes/terminus.py, trainers/terminus_rollout.py as TRL's rollout_func). Episodes that infrastructure ended (sandbox
start, verifier, an episode server) are not scored: kept out of the advantage and counted by kind in
run_summary.json. TRL's `environment_factory` runs the episodes; turns and tokens are its
`max_tool_calling_iterations` and `max_completion_length`. With `eval_suites`, every checkpoint is evaluated as it is
saved (trainers/eval_callback.py), in the harness it is trained in (eval_agent follows `harness`); with
`eval_on_start: true` also the start, before the first step, as checkpoint-0.
"""

import sys
import time
from functools import partial
from pathlib import Path

from accelerate import PartialState
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config

from common.build_locks import clear_stale_build_locks
from common.checkpoints import last_complete_checkpoint
from common.harnesses import TERMINUS_2_HARNESS
from episodes.local import EpisodeStats
from modeling.tiny_model import resolve_model
from trainers.agentic import (
    AgenticTaskArguments,
    check_eval_agent,
    check_held_out,
    environment_factory,
    episode_transcript,
    prepare_tasks,
    task_dataset,
    task_tests_reward,
)
from trainers.eval_callback import EvalArguments, EvalOnSaveCallback
from trainers.recipe_config import exit_on_user_error, parse_config
from trainers.summary import build_agentic_summary, print_agentic_summary, write_summary
from trainers.task_profiling import profile_tasks
from trainers.terminus_rollout import terminus_rollout

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo" / "agentic-tiny.yaml"


class AgenticGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer, its completions table (log_completions: the parquet files and W&B) holding each episode
    as a transcript (episode_transcript): W&B refuses TRL's message lists when tool calls are in them."""

    def log(self, logs, start_time=None):
        for key in ("prompt", "completion"):
            entries = self._logs[key]
            for index, messages in enumerate(entries):
                entries[index] = episode_transcript(messages)
        super().log(logs, start_time)


@exit_on_user_error
def main():
    task_args, training_args, model_args, eval_args = parse_config(
        (AgenticTaskArguments, GRPOConfig, ModelConfig, EvalArguments), DEFAULT_CONFIG)
    state = PartialState()
    clear_stale_build_locks()  # a run killed while DeepSpeed built an op left its lock: every start would wait on it
    with state.main_process_first():  # the main process builds the tiny model and generates the tasks
        model_path = resolve_model(model_args.model_name_or_path)
        tasks = prepare_tasks(task_args)
    seeds = check_held_out(task_args.task_dirs, eval_args.eval_suites)
    config = sys.argv[sys.argv.index("--config") + 1] if "--config" in sys.argv else str(DEFAULT_CONFIG)
    eval_args.eval_agent = check_eval_agent(task_args, eval_args.eval_agent, config, sys.argv[1:])
    task_profile = None
    if task_args.profile_attempts:  # the main process runs the start's trials; the others read its task_profile.json
        with state.main_process_first():
            tasks, task_profile = profile_tasks(tasks, model_path, eval_args.settings(""),
                                                task_args.profile_options(training_args.temperature),
                                                training_args.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision, padding_side="left")

    # step 0 (eval_on_start: checkpoint-0 scored like every save) is the callback's: the Trainer's own would first
    # compute an eval loss, which needs an eval dataset this recipe does not have
    eval_on_start, training_args.eval_on_start = training_args.eval_on_start, False
    stats = EpisodeStats()
    reward = task_tests_reward(stats)
    callback = EvalOnSaveCallback(eval_args, eval_on_start=eval_on_start) if eval_args.eval_suites else None
    training_args.model_init_kwargs = {"revision": model_args.model_revision, "dtype": model_args.dtype,
                                       **(training_args.model_init_kwargs or {})}
    # Terminus-2 episodes: the rollout owns the turns, each response capped as the evals cap one call (eval_max_tokens)
    rollout = (partial(terminus_rollout, max_turn_tokens=eval_args.eval_max_tokens)
               if task_args.harness == TERMINUS_2_HARNESS else None)
    trainer = AgenticGRPOTrainer(model=model_path, reward_funcs=[reward], args=training_args,
                                 train_dataset=task_dataset(tasks, task_args.harness), processing_class=tokenizer,
                                 environment_factory=environment_factory(task_args, stats),
                                 rollout_func=rollout,
                                 peft_config=get_peft_config(model_args),
                                 callbacks=[callback] if callback else None)
    resume = training_args.resume_from_checkpoint or last_complete_checkpoint(training_args.output_dir)
    started = time.monotonic()
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model()

    summary = build_agentic_summary(trainer, tasks, task_args.task_dirs, stats.as_dict(), time.monotonic() - started,
                                    resume, by_family=reward.by_family, evals=callback.completed if callback else None,
                                    seeds=seeds, harness=task_args.harness, task_profile=task_profile)
    if trainer.is_world_process_zero():
        print_agentic_summary(summary)
        write_summary(summary)
    trainer.end()


if __name__ == "__main__":
    main()
