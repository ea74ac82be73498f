"""Launchers and GPU configs that cannot run here (no SLURM, no GPU): the scripts parse, the GRPO and agentic GRPO
sbatch scripts split their nodes and start the right commands under a stand-in SLURM (srun, scontrol and curl
replaced by scripts that log), and the 8-GPU config parses through the recipe's own parser (with the GPU's bf16 check
answered yes)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SCRIPTS = sorted((REPO / "launch").rglob("*.sbatch")) + sorted((REPO / "launch").rglob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_launch_scripts_parse(script):
    run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    if shutil.which("shellcheck") and script.name == "grpo_agentic.sbatch":
        check = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


def test_the_8gpu_config_parses_through_the_recipes_parser(monkeypatch):
    import transformers.training_args
    from trl import GRPOConfig, ModelConfig

    from trainers.agentic import AgenticTaskArguments
    from trainers.recipe_config import parse_config

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)  # the GPU
    config = REPO / "configs" / "grpo" / "agentic-8gpu.yaml"
    saved = dict(os.environ)
    try:
        tasks, grpo, model = parse_config((AgenticTaskArguments, GRPOConfig, ModelConfig), config,
                                          ["--config", str(config)])
        assert os.environ["WANDB_PROJECT"] == "terminal-recipes"  # the config's env: block, applied
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert grpo.use_vllm and grpo.vllm_mode == "server" and grpo.vllm_server_base_url.startswith("http://")
    assert grpo.bf16 and not grpo.use_cpu and grpo.report_to == ["wandb"] and grpo.beta == 0.0
    assert "WANDB_MODE" not in yaml.safe_load(config.read_text())["env"]  # W&B online
    assert model.dtype == "bfloat16" and model.attn_implementation == "flash_attention_2"
    assert len(tasks.sandbox_urls) == 2 and all(url.startswith("http://") for url in tasks.sandbox_urls)
    limits = tasks.limits()
    assert limits.episode_wall_sec >= 600 and limits.command_timeout_sec >= 60 and limits.memory_mb >= 2048
    # a step's episodes form whole groups, on 8 ranks and on the one-node layout's 6
    for ranks in (8, 6):
        episodes = grpo.per_device_train_batch_size * ranks * grpo.gradient_accumulation_steps
        assert episodes % grpo.num_generations == 0
    deepspeed = yaml.safe_load((REPO / "configs" / "accelerate" / "zero3.yaml").read_text())
    assert deepspeed["distributed_type"] == "DEEPSPEED" and deepspeed["num_processes"] == 8



def test_the_terminus_2_8gpu_config_parses_and_trains_terminus_2_with_vllm(monkeypatch):
    import transformers.training_args
    from trl import GRPOConfig, ModelConfig

    from trainers.agentic import AgenticTaskArguments
    from trainers.recipe_config import parse_config

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)  # the GPU
    config = REPO / "configs" / "grpo" / "agentic-terminus-8gpu.yaml"
    saved = dict(os.environ)
    try:
        tasks, grpo, model = parse_config((AgenticTaskArguments, GRPOConfig, ModelConfig), config,
                                          ["--config", str(config)])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert tasks.harness == "terminus-2" and len(tasks.sandbox_urls) == 2  # Terminus-2 sessions on episode servers
    assert all(url.startswith("http://") for url in tasks.sandbox_urls)
    assert grpo.use_vllm and grpo.vllm_mode == "server" and grpo.bf16 and not grpo.use_cpu
    assert model.dtype == "bfloat16" and "eval_agent" not in yaml.safe_load(config.read_text())
    for ranks in (8, 6):
        assert grpo.per_device_train_batch_size * ranks * grpo.gradient_accumulation_steps % grpo.num_generations == 0

STUBS = {
    # log the step and whether its servers get the job's token (a server bound to 0.0.0.0 refuses to start without
    # one), in one write: the launchers start their server steps in the background, at once
    "srun": r'''#!/bin/bash
token=${EPISODE_SERVER_TOKEN:-${REWARD_SERVER_TOKEN:-}}
line="$*"
printf '%s [token: %s]\n' "${line//$'\n'/ }" "${token:+set}" >> "$SRUN_LOG"
''',
    "scontrol": '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && tr , "\\n" <<< "$3"\n',
    "curl": '#!/bin/bash\necho "${@: -1}" >> "$CURL_LOG"\necho "{}"\n',  # every server answers /health
}


def dry_run(tmp_path: Path, script: str, config: Path, roles: dict[str, str], **env) -> tuple[
        subprocess.CompletedProcess, dict, list[str]]:
    """launch/slurm/SCRIPT run with the stand-ins first on PATH: the run, the srun command line of each role (the
    first step holding its marker; {} when it started none) and the URLs curl was asked for."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in STUBS.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log, curl_log = tmp_path / "srun.log", tmp_path / "curl.log"
    # the launchers' own settings come from env only, not from the shell the tests run in
    outside = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "VLLM_", "EPISODE_", "REWARD_", "GPUS_PER_NODE", "POLICY"))}
    run = subprocess.run(["bash", str(REPO / "launch" / "slurm" / script), "--max_steps", "3"],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**outside, "PATH": f"{stubs}:{os.environ['PATH']}", "SRUN_LOG": str(log),
                              "CURL_LOG": str(curl_log), "CONFIG": str(config), "SLURM_SUBMIT_DIR": str(REPO),
                              "SLURM_JOB_ID": "4242", **env})
    steps = log.read_text().splitlines() if log.exists() else []
    urls = curl_log.read_text().splitlines() if curl_log.exists() else []
    return run, {role: next(s for s in steps if marker in s) for role, marker in roles.items()} if steps else {}, urls


def dry_run_agentic(tmp_path: Path, config_name: str = "agentic-8gpu.yaml", **env) -> tuple[
        subprocess.CompletedProcess, dict]:
    """grpo_agentic.sbatch on a copy of an 8-GPU config with 4 generated tasks."""
    config = yaml.safe_load((REPO / "configs" / "grpo" / config_name).read_text())
    config.update(task_dirs=[str(tmp_path / "tasks")], generate_n=4)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    roles = {"episode": "episodes.server", "vllm": "vllm-serve", "train": "grpo_agentic.py"}
    run, steps, _ = dry_run(tmp_path, "grpo_agentic.sbatch", tmp_path / "config.yaml", roles, **env)
    return run, steps


def test_the_agentic_sbatch_splits_nodes_and_starts_every_server(tmp_path):
    run, steps = dry_run_agentic(tmp_path, SLURM_JOB_NODELIST="n1,n2,n3,n4,n5", EPISODE_NODES="2",
                                 EPISODE_SERVERS_PER_NODE="2")
    assert run.returncode == 0, run.stdout + run.stderr
    urls = "http://n4:8200,http://n4:8201,http://n5:8200,http://n5:8201"
    assert f"trainers: n1 n2 (16 ranks); vLLM: n3; episode servers: {urls}" in run.stdout
    assert "4 tasks under" in run.stderr and len(list((tmp_path / "tasks").iterdir())) == 4
    episode, vllm, train = steps["episode"], steps["vllm"], steps["train"]
    assert "--nodelist=n4,n5" in episode and "python -m episodes.server --tasks" in episode
    assert str(tmp_path / "tasks") in episode and "--max_sessions 64 --lease_sec 300" in episode
    assert "--host 0.0.0.0" in episode and episode.endswith("[token: set]")  # made per job, exported to every step
    assert "--nodelist=n3" in vllm and "trl vllm-serve --model outputs/sft-qwen3-8b-bash-tool" in vllm
    assert "--tensor_parallel_size 8 --data_parallel_size 1 --max_model_len 24576" in vllm
    assert "--nodelist=n1,n2" in train and "recipes/grpo_agentic.py" in train and "--max_steps 3" in train
    assert '--sandbox_urls "$SANDBOX_URLS"' in train and '--vllm_server_base_url "http://$VLLM_NODE:8000"' in train


def test_the_agentic_sbatch_puts_episode_servers_on_a_heterogeneous_jobs_cpu_nodes(tmp_path):
    run, steps = dry_run_agentic(tmp_path, SLURM_JOB_NODELIST="g1,g2,c1,c2", SLURM_JOB_NODELIST_HET_GROUP_0="g1,g2",
                         SLURM_JOB_NODELIST_HET_GROUP_1="c1,c2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trainers: g1 (8 ranks); vLLM: g2; episode servers: http://c1:8200,http://c2:8200" in run.stdout
    assert steps["episode"].startswith("--het-group=1 ") and "--nodelist=c1,c2" in steps["episode"]
    assert "--nodelist=g2" in steps["vllm"] and "--nodelist=g1 " in steps["train"]


def test_the_agentic_sbatch_runs_the_terminus_2_config_unchanged(tmp_path):
    """The same launcher serves Terminus-2 episodes: its servers take the config's tasks, the trainers its harness."""
    run, steps = dry_run_agentic(tmp_path, "agentic-terminus-8gpu.yaml", SLURM_JOB_NODELIST="n1,n2,n3",
                                 VLLM_MAX_MODEL_LEN="32768")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trainers: n1 (8 ranks); vLLM: n2; episode servers: http://n3:8200" in run.stdout
    assert "python -m episodes.server --tasks" in steps["episode"] and str(tmp_path / "tasks") in steps["episode"]
    assert "trl vllm-serve --model outputs/sft-qwen3-8b-terminus-2" in steps["vllm"]
    assert "--max_model_len 32768" in steps["vllm"]
    assert '--sandbox_urls "$SANDBOX_URLS"' in steps["train"] and "recipes/grpo_agentic.py" in steps["train"]


def test_the_agentic_sbatch_refuses_too_few_nodes(tmp_path):
    run, steps = dry_run_agentic(tmp_path, SLURM_JOB_NODELIST="n1,n2")
    assert run.returncode == 2 and "need at least 3 nodes" in run.stderr and steps == {}


def dry_run_grpo(tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    """grpo.sbatch on the config it is documented for (a dense Qwen3-8B)."""
    roles = {"serve": "vllm-serve", "train": "recipes/grpo.py"}
    return dry_run(tmp_path, "grpo.sbatch", REPO / "configs" / "grpo" / "terminal_pivot.yaml", roles, **env)


def test_the_grpo_sbatch_serves_a_dense_model_tensor_parallel_on_the_last_node(tmp_path):
    """TRL 1.16's vllm-serve takes data_parallel_size > 1 for MoE models only: the default is one tensor-parallel
    server over the whole node, which a dense policy (Qwen3-8B here) can run."""
    run, steps, urls = dry_run_grpo(tmp_path, SLURM_JOB_NODELIST="n1,n2,n3")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trainers: n1 n2 (16 ranks); vLLM + 4 reward servers: n3" in run.stdout
    serve, train = steps["serve"], steps["train"]
    assert serve.startswith("--nodes=1 --ntasks=1 --nodelist=n3 ")
    assert "trl vllm-serve --model Qwen/Qwen3-8B --host 0.0.0.0 --port 8000" in serve
    assert "--tensor_parallel_size 8 --data_parallel_size 1" in serve
    assert "python -m rewards.server --config configs/rewards/all.yaml --host 0.0.0.0" in serve
    assert "seq 0 3" in serve and serve.endswith("[token: set]")  # 4 replicas, the job's token exported
    assert train.startswith("--nodes=2 --ntasks=2 --nodelist=n1,n2 ") and "--max_steps 3" in train
    assert '--reward_url "$REWARD_URLS"' in train and '--vllm_server_base_url "http://$SERVE_NODE:8000"' in train
    waited = list(dict.fromkeys(urls))  # the servers training waits for, on the serve node
    assert waited == ["http://n3:8000/health/"] + [f"http://n3:{port}/health" for port in range(8100, 8104)]


@pytest.mark.parametrize("env, parallel", [
    ({"VLLM_DP": "2"}, "--tensor_parallel_size 4 --data_parallel_size 2"),  # an MoE policy: TP follows DP
    ({"VLLM_TP": "2"}, "--tensor_parallel_size 2 --data_parallel_size 1"),
    ({"VLLM_TP": "2", "VLLM_DP": "2", "GPUS_PER_NODE": "4"}, "--tensor_parallel_size 2 --data_parallel_size 2"),
])
def test_the_grpo_sbatch_takes_vllm_parallel_sizes_from_the_environment(tmp_path, env, parallel):
    run, steps, _ = dry_run_grpo(tmp_path, SLURM_JOB_NODELIST="n1,n2", **env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert parallel in steps["serve"] and "--nodelist=n2" in steps["serve"]
    assert "--nodelist=n1 " in steps["train"]


@pytest.mark.parametrize("env, message", [
    ({"VLLM_TP": "8", "VLLM_DP": "2"}, "VLLM_TP=8 x VLLM_DP=2 needs 16 GPUs, the vLLM node has GPUS_PER_NODE=8"),
    ({"VLLM_DP": "16"}, "VLLM_TP=1 x VLLM_DP=16 needs 16 GPUs"),
    ({"VLLM_DP": "two"}, "VLLM_DP=two: set it to a positive integer"),
    ({"VLLM_TP": "0"}, "VLLM_TP=0: set it to a positive integer"),
])
def test_the_grpo_sbatch_refuses_vllm_sizes_the_node_cannot_hold(tmp_path, env, message):
    run, steps, _ = dry_run_grpo(tmp_path, SLURM_JOB_NODELIST="n1,n2", **env)
    assert run.returncode == 2 and f"error: {message}" in run.stderr and steps == {}


def test_the_grpo_sbatch_refuses_too_few_nodes(tmp_path):
    run, steps, urls = dry_run_grpo(tmp_path, SLURM_JOB_NODELIST="n1")
    assert run.returncode == 2 and "need at least 2 nodes" in run.stderr and steps == {} and urls == []


def test_launchers_call_modules_and_carry_no_python():
    """No program inside a launcher: a script calls `python -m MODULE`, never Python in a heredoc or `-c`."""
    inline = re.compile(r"python3?\s+(-\s|-c\b|-\s*<<)")
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for path in sorted((REPO / "launch").rglob("*")) if path.is_file()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if inline.search(line)]
    assert not found, "\n".join(found)
