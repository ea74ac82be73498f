"""Rejection sampling in the loaders: a Harbor job source with `min_reward` keeps the trials whose verifier reward is
at least that, and counts the ones it leaves out (below it, or without a reward) in the loader, `inspect` and the SFT
run summary."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
from chat_corpus.sources import Source, load_source
from common.errors import CorpusError
from harbor_tasks.verdict import trial_verdict

JOB = REPO / "data" / "harbor" / "sample-job"  # 5 trials: 3 with reward 1.0, 2 with 0.0


@pytest.fixture
def job(tmp_path):
    """The sample job plus a sixth trial whose result.json has no verifier result (an errored trial)."""
    copy = tmp_path / "job"
    shutil.copytree(JOB, copy)
    errored = copy / "csv-pipeline__ERRORED"
    shutil.copytree(copy / "csv-pipeline__8mDN0LU", errored)
    result = json.loads((errored / "result.json").read_text())
    result.update(verifier_result=None, trial_name="csv-pipeline__ERRORED")
    (errored / "result.json").write_text(json.dumps(result))
    return copy


def _rewards(loaded):
    return sorted(record["origin"].split("/")[-3].split("__")[0] for record in loaded.records)


def test_min_reward_keeps_the_rewarded_trials_and_counts_the_rest(job):
    everything = load_source(Source(str(job)), "metadata.source_trajectory_uid")
    assert len(everything.records) == 6 and everything.below_min_reward == everything.no_reward == 0

    kept = load_source(Source(str(job), min_reward=1.0), "metadata.source_trajectory_uid")
    assert _rewards(kept) == ["csv-pipeline", "make-link-error", "nginx-config"]
    assert (kept.below_min_reward, kept.no_reward, kept.n_rows, kept.problems) == (2, 1, 6, [])

    lenient = load_source(Source(str(job), min_reward=0.0), "metadata.source_trajectory_uid")
    assert len(lenient.records) == 5 and lenient.no_reward == 1  # 0.0 >= 0.0; the errored trial has none


def test_rejection_sampling_reads_a_trial_as_eval_does(job):
    """The trial's verdict (harbor_tasks.verdict.trial_verdict): reward.json's numbers without a "reward" key are
    their mean (0.5, not missing), a verifier timeout is an agent failure scored 0, and an infrastructure failure
    has no reward (never a 0 that min_reward would count as a failed attempt) and says its kind."""
    def trial(name, **changes):
        path = job / f"csv-pipeline__{name}"
        shutil.copytree(job / "csv-pipeline__8mDN0LU", path)
        result = json.loads((path / "result.json").read_text())
        result.update(trial_name=f"csv-pipeline__{name}", **changes)
        (path / "result.json").write_text(json.dumps(result))

    trial("PARTIAL", verifier_result={"rewards": {"a": 1, "b": 0}})
    trial("TIMEOUT", verifier_result=None, exception_info={"exception_type": "VerifierTimeoutError"})
    trial("OFFLINE", verifier_result={"rewards": {"reward": 0.0}},
          exception_info={"exception_type": "NetworkNeededError"})
    kept = load_source(Source(str(job), min_reward=0.5), "metadata.source_trajectory_uid")
    groups = {record["group"] for record in kept.records}
    assert "csv-pipeline__PARTIAL" in groups and not groups & {"csv-pipeline__TIMEOUT", "csv-pipeline__OFFLINE"}
    assert kept.no_reward == 2  # the errored trial and the infrastructure failure: no reward, not a failed 0
    assert kept.below_min_reward == 3  # the sample's two 0.0 trials and the timeout's 0
    offline = trial_verdict(json.loads((job / "csv-pipeline__OFFLINE" / "result.json").read_text()))
    assert (offline.outcome, offline.infra_kind, offline.score) == ("infra_failure", "network", None)


def test_min_reward_must_be_a_number():
    with pytest.raises(CorpusError, match=r"datasets\[0\]\.min_reward: 'high' must be a number"):
        Source.from_config({"path": "x", "min_reward": "high"}, "datasets[0]")


def test_the_sft_summary_counts_what_min_reward_left_out(job, tokenizer):
    args = CorpusArguments(datasets=[{"path": str(job), "min_reward": 1.0}])
    corpus = build_sft_corpus(args, tokenizer, max_length=4096, show_progress=False)
    (stat,) = corpus.stats
    assert (stat.rows, stat.below_min_reward, stat.train_records) == (6, 3, 3)


def test_inspect_applies_min_reward(job):
    result = subprocess.run([sys.executable, "-m", "trainers.data", "inspect", str(job), "--min_reward", "1",
                             "--no_tokens", "--json", "--strict"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["valid"], report["below_min_reward"], report["no_reward"]) == (3, 2, 1)
