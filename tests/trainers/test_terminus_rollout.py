"""Agentic GRPO's Terminus-2 rollout (trainers/terminus_rollout.py) in a real GRPOTrainer with real Terminus-2
episodes in the local sandbox. The policy is scripted (its per-turn generation returns the token ids of written
responses): what is checked is the harness around it, that the tokens trained are the tokens sampled and that the
screens between them are never trained."""

import json

import httpx
import pytest
from conftest import AGENTIC_FAMILIES as FAMILIES

from eval.scripted_teacher import ScriptedTask, action_text, load_tasks
from harbor_tasks.generate import generate

GARBAGE = "I will look around first."  # no JSON: Terminus-2 answers with its parse-error message


def scripted_trainer(tmp_path, responses_for, max_completion_length=1024, max_observations=4, sandbox_urls=(),
                     max_turn_tokens=None):
    """A GRPOTrainer on the tiny model, Terminus-2 episodes of one task (two a step; on episode servers with
    `sandbox_urls`), and a policy that answers `responses_for(rendered conversation, turn, position in this
    generation call)`; returns (trainer, stats, the rollouts' outputs, TRL's outputs)."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from episodes.local import EpisodeStats
    from modeling.tiny_model import resolve_model
    from trainers.agentic import AgenticTaskArguments, environment_factory, task_dataset, task_tests_reward
    from trainers.terminus_rollout import terminus_rollout

    model = resolve_model("builtin:tiny-qwen3")
    tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
    rollouts, outputs = [], []

    class Scripted(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
            completions = []
            for position, ids in enumerate(prompt_ids):
                rendered = tokenizer.decode(ids)
                turn = rendered.count("<|im_start|>assistant") - 1  # the turns this episode has taken
                text = responses_for(rendered, turn, position)
                ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
                completions.append(ids[: self.generation_config.max_new_tokens])  # a sampler stops at the cap too
            return completions, None

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            outputs.append(output)
            return output

    def capturing(prompts, trainer):
        result = terminus_rollout(prompts, trainer, max_turn_tokens=max_turn_tokens)
        rollouts.append(result)
        return result

    stats = EpisodeStats()
    task_args = AgenticTaskArguments(task_dirs=[str(tmp_path / "tasks")], harness="terminus-2",
                                     sandbox_urls=list(sandbox_urls))
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, report_to=[], max_steps=1, num_generations=2,
                      per_device_train_batch_size=2, max_completion_length=max_completion_length,
                      max_tool_calling_iterations=max_observations, chat_template_kwargs={"enable_thinking": False},
                      save_strategy="no", logging_steps=1, beta=0.0)
    tasks = sorted((tmp_path / "tasks").iterdir())[:1]
    trainer = Scripted(model=model, reward_funcs=[task_tests_reward(stats)], args=args,
                       train_dataset=task_dataset(tasks, "terminus-2"), processing_class=tokenizer,
                       environment_factory=environment_factory(task_args, stats), rollout_func=capturing)
    return trainer, stats, rollouts, outputs


@pytest.fixture
def task(tmp_path):
    generate(tmp_path / "tasks", 31, 1, FAMILIES[:1])
    return load_tasks(tmp_path / "tasks")[0]


def solving(task: ScriptedTask):
    """Act, mark complete, confirm: what the scripted teacher's Terminus-2 trajectories do."""
    done = action_text(ScriptedTask.done_action())
    return [action_text(task.first_action()), done, done]


def test_a_solving_episode_scores_one_and_trains_exactly_its_sampled_tokens(tmp_path, task):
    """Two episodes of one task: one solves it (act, complete, confirm), the other answers without JSON until the
    turns run out. The first scores 1, the second 0; each completion's trained tokens are its responses as sampled,
    end-of-turn tokens included, and its untrained tokens are Terminus-2's messages between them."""
    def responses_for(rendered, turn, position):
        garbage = GARBAGE in rendered if turn else position == 1  # the second episode of the first call
        return GARBAGE if garbage else solving(task)[turn]

    trainer, stats, rollouts, outputs = scripted_trainer(tmp_path, responses_for)
    trainer.train()
    tokenizer = trainer.processing_class
    rollout = rollouts[0]
    assert sorted(rollout["ended"]) == ["done", "max_tool_calling_iterations"]
    for ids, mask, ended in zip(rollout["completion_ids"], rollout["env_mask"], rollout["ended"]):
        assert len(ids) == len(mask)
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        untrained = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        turns = solving(task) if ended == "done" else [GARBAGE] * 5
        assert trained == "".join(text + tokenizer.eos_token for text in turns)
        if ended == "done":
            assert "Are you sure you want to mark the task as complete?" in untrained
        else:
            assert untrained.count("Previous response had parsing errors") == 4
        assert '"analysis"' not in untrained and GARBAGE not in untrained  # no response of the policy's
    # what TRL trained: its tool_mask is the rollout's env_mask
    output = outputs[0]
    for row, (ids, mask) in enumerate(zip(rollout["completion_ids"], rollout["env_mask"])):
        assert output["completion_ids"][row][: len(ids)].tolist() == ids
        assert output["tool_mask"][row][: len(mask)].tolist() == mask
    rewards = trainer.state.log_history[0]
    assert rewards["episodes/pass_rate"] == 0.5
    summary = stats.as_dict()
    assert summary["episodes"] == 2 and summary["scored"] == 2 and summary["passed"] == 1
    assert json.dumps(summary)  # the counts the run summary writes


def test_the_rollout_drives_episodes_on_an_episode_server(tmp_path, task):
    """The same rollout with `sandbox_urls`: RemoteTerminusEnvironment's episodes, typed on a loopback episode
    server, solve (1) and fail to parse (0), and the server's counts (parse errors) reach the trainer's."""
    from servers import ServerThread

    from episodes.app import EpisodeServerConfig, create_app
    from episodes.remote import RemoteTerminusEnvironment

    def responses_for(rendered, turn, position):
        garbage = GARBAGE in rendered if turn else position == 1
        return GARBAGE if garbage else solving(task)[turn]

    with ServerThread(create_app(EpisodeServerConfig(tasks=[tmp_path / "tasks"], max_sessions=4))) as url:
        trainer, stats, rollouts, _ = scripted_trainer(tmp_path, responses_for, sandbox_urls=[url])
        trainer.train()
        health = httpx.get(f"{url}/health").json()
    assert all(isinstance(env, RemoteTerminusEnvironment) for env in trainer.environments)
    assert sorted(rollouts[0]["ended"]) == ["done", "max_tool_calling_iterations"]
    assert trainer.state.log_history[0]["episodes/pass_rate"] == 0.5
    summary = stats.as_dict()
    assert summary["scored"] == 2 and summary["passed"] == 1 and summary["masked"] == 0
    assert summary["parse_errors"] == 5 and summary["commands"] >= 1  # the garbage episode's five turns
    assert health["sessions"]["verified"] == 2 and health["live_sessions"] == 0


def test_an_episode_cut_by_the_token_budget_is_verified_as_it_stands(tmp_path, task):
    """A budget too small for the first screen and a reply: the episode ends after its first turn, unrun."""
    trainer, stats, rollouts, _ = scripted_trainer(tmp_path, lambda rendered, turn, position: solving(task)[turn],
                                                   max_completion_length=24)
    trainer.train()
    assert rollouts[0]["ended"] == ["max_completion_length"] * 2
    assert all(sum(mask) == len(mask) == 24 for mask in rollouts[0]["env_mask"])
    assert stats.as_dict()["scored"] == 2 and stats.as_dict()["passed"] == 0


def test_a_response_cut_at_the_per_turn_cap_runs_nothing_and_is_told_so_as_harbor_tells_it(tmp_path, task):
    """A first response longer than max_turn_tokens (the evals' max_tokens) stops there: nothing of it runs, the
    end-of-turn token the template closes it with follows untrained, and the next message is Terminus-2's output-limit
    message; the episode goes on and solves the task. As in Harbor, the question asked again is the same turn: the
    three turns after it fit a limit of three (two screens fed back), the cut response not among them."""
    long = action_text({**task.first_action(), "analysis": "x " * 400})

    def responses_for(rendered, turn, position):
        return [long, *solving(task)][turn]

    trainer, stats, rollouts, _ = scripted_trainer(tmp_path, responses_for, max_turn_tokens=200, max_observations=2)
    trainer.train()
    tokenizer = trainer.processing_class
    assert rollouts[0]["turns"] == [3, 3]
    for ids, mask, ended in zip(rollouts[0]["completion_ids"], rollouts[0]["env_mask"], rollouts[0]["ended"]):
        assert ended == "done" and ids[200] == tokenizer.eos_token_id and mask[:201] == [1] * 200 + [0]
        untrained = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        assert ("ERROR!! NONE of the actions you just requested were performed because you exceeded 200 tokens. "
                "Your outputs must be less than 200 tokens.") in untrained
    assert trainer.generation_config.max_new_tokens == 1024  # the cap was the call's only
    assert stats.as_dict()["passed"] == 2 and stats.as_dict()["parse_errors"] == 0


def test_observation_ids_follow_a_sampled_turn_in_the_training_template():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    from modeling.tiny_model import resolve_model
    from trainers.terminus_rollout import observation_ids

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-qwen3"))
    with pytest.raises(ValueError, match="prefix-preserving"):  # Qwen3's own drops the empty think block
        observation_ids(tokenizer, "New Terminal Output:\n$ ", {"enable_thinking": False})
    template = {"chat_template": get_training_chat_template(tokenizer), "enable_thinking": False}
    ids = observation_ids(tokenizer, "New Terminal Output:\n$ ", template)
    assert tokenizer.decode(ids) == ("\n<|im_start|>user\nNew Terminal Output:\n$ <|im_end|>\n<|im_start|>assistant\n"
                                     "<think>\n\n</think>\n\n")
