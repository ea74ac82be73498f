"""The bundled sample corpora are what `data/make_samples.py` (and its modules in data/samples/) writes: regenerating
them reproduces every committed file byte for byte, those bytes are the ones recorded below, and no committed corpus
file is left that the generator does not make (but the hand-written GRPO rows listed below)."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

DATA = REPO / "data"
HAND_WRITTEN = {"grpo/multichallenge.jsonl", "grpo/verifif.jsonl"}  # NeMo Gym-shaped rows written by hand
NOT_CORPORA = {".md", ".py"}
# sha256 of every file the generator writes (`cd data && sha256sum FILE...`), recorded from the committed samples: a
# change to the generator that changes a byte fails here, even when the regenerated files are committed with it
SHA256 = """\
f7b02c45189fc4b2bd4d72c8b01e0b86953632f611b6bd1262b23f5e998bc82d  harbor/sample-job/config.json
c31d5eb59ce7aa6faca1c34ea32eb3965acaed3e5c3eee6c00657889737f4b4f  harbor/sample-job/csv-pipeline__8mDN0LU/agent/trajectory.json
97719e82b12946e68a611e736804e8ad3bfacc3d6e0f819ef99b7b1b5798bea6  harbor/sample-job/csv-pipeline__8mDN0LU/result.json
4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865  harbor/sample-job/csv-pipeline__8mDN0LU/verifier/reward.txt
81c7f40ef79a8324adea7eba2bf58cebfdb39e44f00ced0040c9202f6ca065c5  harbor/sample-job/csv-pipeline__8mDN0LU/verifier/test-stdout.txt
d2f913dde5fa1fcf27de3c5a7e968748eb7a6a8a07c0cd7aa410f92ee1b17ac3  harbor/sample-job/git-move-commits__kmtB9dp/agent/trajectory.json
27539e3429a3363dc34e6e768f203478cb02cc79481d02f3103117d69943a3bd  harbor/sample-job/git-move-commits__kmtB9dp/result.json
9a271f2a916b0b6ee6cecb2426f0b3206ef074578be55d9bc94f6f3fe3ab86aa  harbor/sample-job/git-move-commits__kmtB9dp/verifier/reward.txt
c1dbbbb23ea92216079567c730392e1f1bf04ff38b001d2e019769a781725219  harbor/sample-job/git-move-commits__kmtB9dp/verifier/test-stdout.txt
96f091be7c408a27f24f814c718f77a148b63742b2a599a4d98a0a7c912e5b54  harbor/sample-job/make-link-error__FZSQ85v/agent/trajectory.json
c5152a36536e0d3f604860335a54e15ff563685ab3064af22ea53236d5e02444  harbor/sample-job/make-link-error__FZSQ85v/result.json
4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865  harbor/sample-job/make-link-error__FZSQ85v/verifier/reward.txt
ecb77d3dfa282cbaac34876cd5fc5c45c9e67836beaa42d1b22780c5d0ec3b14  harbor/sample-job/make-link-error__FZSQ85v/verifier/test-stdout.txt
f6bd47b6606e29c3b013a6b4a9af7ff4f8d9faa0e15c73d49d20546f8d28d4ab  harbor/sample-job/nginx-config__c74c3ZZ/agent/trajectory.json
10b099dde1351a47cf58f951fc3c5ad9b0908d74a323b80052e9bcef16c1b960  harbor/sample-job/nginx-config__c74c3ZZ/result.json
4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865  harbor/sample-job/nginx-config__c74c3ZZ/verifier/reward.txt
d8b58e3768690551231e5afb87488caa076d9b681dd74cf7a95d565fb9452576  harbor/sample-job/nginx-config__c74c3ZZ/verifier/test-stdout.txt
0b30cdf3f5bef9f7f6af17410a51f03a54d798fe5d55857a1e47c1402b614b96  harbor/sample-job/result.json
8dc2a9846b0c7488f0b3bcee7267a1c441f469a4066bcad1d923dccda5e38c40  harbor/sample-job/systemd-crashloop__6MzijGo/agent/trajectory.json
bb6ae7510c3f93236fb437e858ca9a6a85751ee7d8922d60d576a60acf770eb8  harbor/sample-job/systemd-crashloop__6MzijGo/exception.txt
1d518a10dbcfa536394b73baf0e4ced5b4d91a975f5c37db8f86b76bd881eafe  harbor/sample-job/systemd-crashloop__6MzijGo/result.json
9a271f2a916b0b6ee6cecb2426f0b3206ef074578be55d9bc94f6f3fe3ab86aa  harbor/sample-job/systemd-crashloop__6MzijGo/verifier/reward.txt
c8ede5794466ab72301f92e33245f9742e063b49618d5acc4e3317104ea8219b  harbor/sample-job/systemd-crashloop__6MzijGo/verifier/test-stdout.txt
847ca020e4f1324f7d03773e8bbef018cc4a5f77dca5c0b28eb8bfecabfddde2  pivot/terminal_pivot.jsonl
897edfd158af0c211f923881d630a604b1ed91346d320fd9d150e6f626c9973f  sft/agent_tool_calls.jsonl
380c96ff32c0cc7a6e826d9ad601d723104131170d94be6efd3c07bb513eb995  sft/sharegpt_tool_calls.jsonl
418e822f5e41ef614f51b377e0090345fabf169036084fb65e2b262d27b2028a  sft/swe_json_strings.jsonl
bcd764451df5e9114d42010564a506a541ba9bfab5a08707e7cf9ebda6a8a2d5  sft/terminus2_chat.jsonl
a15a023a62edf867c19562fb59cee66a09023529f6b16d06bcca532c74ef547e  sft/terminus2_conversations.jsonl
"""
DIGESTS = {name: digest for digest, name in (line.split("  ") for line in SHA256.splitlines())}


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and p.suffix not in NOT_CORPORA and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """data/ as the generator writes it, run by path from another folder: the script and its modules copied alone."""
    tmp = tmp_path_factory.mktemp("samples")
    out = tmp / "data"
    out.mkdir()
    shutil.copy(DATA / "make_samples.py", out / "make_samples.py")
    shutil.copytree(DATA / "samples", out / "samples", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, str(out / "make_samples.py")], cwd=tmp, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


def test_make_samples_reproduces_the_committed_files(generated):
    names = _files(generated)
    assert names, "the generator wrote nothing"
    differing = sorted(name for name in names
                       if not (DATA / name).is_file() or (DATA / name).read_bytes() != (generated / name).read_bytes())
    assert not differing, f"regenerated files differ from the committed ones: {differing[:10]}"
    committed = _files(DATA)
    stale = sorted(committed - names - HAND_WRITTEN)
    assert not stale, f"committed sample files the generator does not make: {stale[:10]}"


@pytest.mark.parametrize("where", ["generated", "committed"])
def test_the_samples_are_the_recorded_bytes(where, generated):
    root = generated if where == "generated" else DATA
    digests = {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in _files(root) - HAND_WRITTEN}
    changed = sorted(name for name in digests.keys() & DIGESTS.keys() if digests[name] != DIGESTS[name])
    assert not changed, f"{where} sample files whose bytes differ from the recorded digests: {changed[:10]}"
    assert digests.keys() == DIGESTS.keys(), (f"not recorded: {sorted(digests.keys() - DIGESTS.keys())[:10]}; "
                                              f"missing: {sorted(DIGESTS.keys() - digests.keys())[:10]}")
