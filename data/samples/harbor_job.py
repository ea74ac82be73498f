"""The Harbor job sample (harbor/sample-job/): 5 Terminus-2 trials of the scenarios, and the job's own files.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
Each trial: agent/trajectory.json (ATIF), verifier/reward.txt and test-stdout.txt, result.json; the job:
result.json and config.json.
"""

import json
import os
import random
import shutil
from datetime import datetime, timedelta, timezone

from .scenarios import build
from .scenarios_data import sc_csv_pipeline
from .scenarios_dev import sc_git, sc_make
from .scenarios_sysadmin import sc_nginx, sc_systemd
from .synthetic_text import det_uuid, rid
from .terminus import CONFIRM, T2_PROMPT, initial_screen, t2_action, terminus_episodes


def iso(t):
    return t.isoformat()


def write_harbor_job(root):
    jroot = os.path.join(root, "harbor", "sample-job")
    if os.path.isdir(jroot):
        shutil.rmtree(jroot)
    os.makedirs(jroot)
    rng = random.Random(31337)
    model = "tr-sft-qwen3-8b-step1200"
    job_name = "2024-06-14__10-02-37"
    job_id = det_uuid(rng)
    t0 = datetime(2024, 6, 14, 10, 2, 37, 118000, tzinfo=timezone.utc)
    agent_kwargs = {"temperature": 0.6, "max_turns": 40, "model_info": {"max_input_tokens": 32768, "max_output_tokens": 4096,
                                                                        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}}
    trials_spec = [(sc_csv_pipeline, 1.0, None), (sc_make, 1.0, None), (sc_git, 0.0, None),
                   (sc_nginx, 1.0, None), (sc_systemd, 0.0, "timeout")]
    trial_names, rewards, exc_trials = [], {}, []
    tot_in = tot_out = 0
    cur = t0
    for ti, (fn, reward, failure) in enumerate(trials_spec):
        seed = 12000 + ti * 7
        sc = build(fn, seed)
        task = sc.key
        tname = f"{task}__{rid(rng)}"
        trial_names.append(tname)
        tdir = os.path.join(jroot, tname)
        os.makedirs(os.path.join(tdir, "agent"))
        os.makedirs(os.path.join(tdir, "verifier"))
        eps = terminus_episodes(sc, rng, confirm=True)
        if failure == "timeout":
            eps = eps[:-3]
        prompt = T2_PROMPT.format(instruction=sc.rounds[0].request, terminal_state=initial_screen(sc))
        start = cur + timedelta(seconds=rng.uniform(20, 60))
        t = start + timedelta(seconds=rng.uniform(1, 3))
        steps = [{"step_id": 1, "timestamp": iso(t), "source": "user", "message": prompt}]
        ptoks = len(prompt) // 4
        total_p = total_c = 0
        api_ms = []
        for ep_i, e in enumerate(eps):
            content = t2_action(e["analysis"], e["plan"], e["commands"], e["complete"])
            ctoks = max(40, len(content) // 4 + rng.randint(-20, 60))
            t = t + timedelta(seconds=rng.uniform(2, 12) + sum(c["duration"] for c in e["commands"]))
            api_ms.append(round(rng.uniform(900, 9000), 1))
            tool_calls = [{"tool_call_id": f"call_{ep_i}_{j + 1}", "function_name": "bash_command",
                           "arguments": {"keystrokes": c["keystrokes"], "duration": c["duration"]}} for j, c in enumerate(e["commands"])]
            if e["complete"]:
                tool_calls.append({"tool_call_id": f"call_{ep_i}_task_complete", "function_name": "mark_task_complete", "arguments": {}})
            pending = e["complete"] and not (ep_i > 0 and eps[ep_i - 1]["complete"])
            obs_text = (f"Current terminal state:\n{e['observation']}\n\n{CONFIRM}" if pending else e["observation"])
            result = {"content": obs_text}
            if len(e["commands"]) == 1:
                result = {"source_call_id": f"call_{ep_i}_1", "content": obs_text}
            step = {"step_id": len(steps) + 1, "timestamp": iso(t), "source": "agent", "model_name": f"hosted_vllm/{model}",
                    "message": f"Analysis: {e['analysis']}\nPlan: {e['plan']}"}
            if tool_calls:
                step["tool_calls"] = tool_calls
            step["observation"] = {"results": [result]}
            step["metrics"] = {"prompt_tokens": ptoks, "completion_tokens": ctoks}
            steps.append(step)
            total_p += ptoks
            total_c += ctoks
            ptoks += ctoks + len(obs_text) // 4
        traj = {"schema_version": "ATIF-v1.8", "session_id": det_uuid(rng),
                "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": f"hosted_vllm/{model}",
                          "extra": {"parser": "json", "temperature": 0.6}},
                "steps": steps,
                "final_metrics": {"total_prompt_tokens": total_p, "total_completion_tokens": total_c, "total_cached_tokens": 0}}
        with open(os.path.join(tdir, "agent", "trajectory.json"), "w") as f:
            f.write(json.dumps(traj, indent=2, ensure_ascii=False))
        agent_end = t + timedelta(seconds=rng.uniform(0.5, 2))
        exc = None
        if failure == "timeout":
            agent_end = start + timedelta(seconds=900)
            exc = {"exception_type": "AgentTimeoutError", "exception_message": "Agent execution timed out after 900.0 seconds",
                   "exception_traceback": "Traceback (most recent call last):\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 520, in wait_for\n    return await fut\n           ^^^^^^^^^\nasyncio.exceptions.CancelledError\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 412, in _execute_agent\n    await asyncio.wait_for(\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 519, in wait_for\n    async with timeouts.timeout(timeout):\n  File \"/usr/lib/python3.12/asyncio/timeouts.py\", line 115, in __aexit__\n    raise TimeoutError from exc_val\nTimeoutError\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 430, in _execute_agent\n    raise AgentTimeoutError(\nharbor.trial.trial.AgentTimeoutError: Agent execution timed out after 900.0 seconds\n",
                   "occurred_at": iso(agent_end)}
            exc_trials.append(tname)
            with open(os.path.join(tdir, "exception.txt"), "w") as f:
                f.write(exc["exception_traceback"])
        ver_end = agent_end + timedelta(seconds=rng.uniform(4, 20))
        with open(os.path.join(tdir, "verifier", "reward.txt"), "w") as f:
            f.write(f"{int(reward)}\n")
        with open(os.path.join(tdir, "verifier", "test-stdout.txt"), "w") as f:
            f.write(f"+ pytest -q /tests/test_outputs.py\n{'.' * 4 if reward else '..F.'}\n{'4 passed' if reward else '1 failed, 3 passed'} in {rng.uniform(0.5, 3):.2f}s\n")
        rewards.setdefault(float(reward), []).append(tname)
        tot_in += total_p
        tot_out += total_c
        res = {"id": det_uuid(rng), "task_name": task, "trial_name": tname,
               "trial_uri": f"file:///home/ci/terminal-recipes/jobs/{job_name}/{tname}",
               "task_id": {"path": f"tasks/{task}"}, "source": "terminal-recipes-samples",
               "task_checksum": "".join(rng.choice("0123456789abcdef") for _ in range(64)),
               "config": {"task": {"path": f"tasks/{task}", "source": "terminal-recipes-samples"}, "trial_name": tname,
                          "trials_dir": f"jobs/{job_name}", "timeout_multiplier": 1.0,
                          "agent": {"name": "terminus-2", "model_name": f"hosted_vllm/{model}", "kwargs": agent_kwargs},
                          "environment": {"type": "docker", "force_build": False, "delete": True},
                          "verifier": {"disable": False}, "job_id": job_id},
               "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": model, "provider": "hosted_vllm"}},
               "agent_result": {"n_input_tokens": total_p, "n_cache_tokens": 0, "n_output_tokens": total_c, "cost_usd": None,
                                "metadata": {"n_episodes": len(eps), "api_request_times_msec": api_ms, "summarization_count": 0}},
               "verifier_result": {"rewards": {"reward": float(reward)}},
               "exception_info": exc,
               "started_at": iso(start), "finished_at": iso(ver_end + timedelta(seconds=1.3)),
               "environment_setup": {"started_at": iso(start), "finished_at": iso(start + timedelta(seconds=0.9))},
               "agent_setup": {"started_at": iso(start + timedelta(seconds=0.9)), "finished_at": iso(start + timedelta(seconds=1.4))},
               "agent_execution": {"started_at": iso(start + timedelta(seconds=1.4)), "finished_at": iso(agent_end)},
               "verifier": {"started_at": iso(agent_end + timedelta(seconds=0.2)), "finished_at": iso(ver_end)}}
        with open(os.path.join(tdir, "result.json"), "w") as f:
            f.write(json.dumps(res, indent=4, ensure_ascii=False))
        cur = start
    finished = cur + timedelta(seconds=960)
    ev = f"terminus-2__{model}__adhoc"
    n = len(trials_spec)
    job_res = {"id": job_id, "started_at": iso(t0), "updated_at": iso(finished), "finished_at": iso(finished), "n_total_trials": n,
               "stats": {"n_completed_trials": n, "n_errored_trials": len(exc_trials), "n_running_trials": 0, "n_pending_trials": 0,
                         "n_cancelled_trials": 0, "n_retries": 0,
                         "evals": {ev: {"n_trials": n, "n_errors": len(exc_trials),
                                        "metrics": [{"mean": round(sum(r for _, r, _ in trials_spec) / n, 4)}],
                                        "pass_at_k": {}, "reward_stats": {"reward": {str(k): v for k, v in sorted(rewards.items())}},
                                        "exception_stats": {"AgentTimeoutError": exc_trials} if exc_trials else {}}},
                         "n_input_tokens": tot_in, "n_cache_tokens": 0, "n_output_tokens": tot_out, "cost_usd": None}}
    with open(os.path.join(jroot, "result.json"), "w") as f:
        f.write(json.dumps(job_res, indent=4))
    cfg = {"job_name": job_name, "jobs_dir": "jobs", "n_attempts": 1, "timeout_multiplier": 1.0, "agent_timeout_multiplier": None,
           "debug": False, "n_concurrent_trials": 4, "quiet": False,
           "retry": {"max_retries": 0, "include_exceptions": None, "exclude_exceptions": ["AgentTimeoutError", "VerifierTimeoutError"],
                     "wait_multiplier": 1.0, "min_wait_sec": 1.0, "max_wait_sec": 60.0},
           "environment": {"type": "docker", "force_build": False, "delete": True},
           "verifier": {"disable": False},
           "metrics": [],
           "agents": [{"name": "terminus-2", "model_name": f"hosted_vllm/{model}", "kwargs": agent_kwargs}],
           "datasets": [{"path": "tasks", "task_names": [fn(random.Random(0)).key for fn, _, _ in trials_spec]}],
           "tasks": []}
    with open(os.path.join(jroot, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=4))
    return trial_names
