"""Helpers the training-venv packages share (trainers/, rewards/, episodes/, eval/): errors, ports, checkpoints, asgi.
Runs in: the training venv (.venv, Python >= 3.11); bash_harness.py, digest.py, cache_dir.py, harnesses.py,
model_families.py, reasoning.py, terminus_2.py: standard library only.

Not imported by sandbox/ (standard library only). `bash_harness.py` is shared with the Harbor venv: the bash-tool
harness that the agentic trainer and harbor_plugins/bash_tool_agent.py must speak alike. `harnesses.py` is the one
table of harnesses (how the policy acts, how its output is parsed, the eval agent, the episode calls).
`model_families.py` is the one table of model families (templates, tool-call and reasoning formats, parsers, training
support) that serving reads; `reasoning.py` splits a family's reasoning from its answer; `terminus_actions.py` is the
Terminus action schema the reward server scores against and the pivot-row builder checks with; `terminus_2.py` is
Terminus-2's text protocol (prompt, parser, next message, tmux calls) that agentic episodes speak as Harbor's agent
does. `build_locks.py` removes, at a recipe's start, the build lock of a torch extension that a killed run left.
"""
