"""The built-in Harbor task suites (terminal/, evocode/) and their checker (check.py).
Runs in: any Python >= 3.11, standard library only; the generator is harbor_tasks/generate.py.
"""
