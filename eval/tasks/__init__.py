"""Harbor task suites (terminal/, evocode/), their checker (check.py) and the procedural task generator (generate.py)."""
