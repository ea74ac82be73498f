"""The 15 scenarios in their fixed order (the corpora's seeds and picks index it), and build(): one from a seed.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
"""

import random

from .scenarios_data import sc_accesslog, sc_csv_pipeline, sc_ledger, sc_sqlite
from .scenarios_dev import sc_git, sc_make, sc_packaging, sc_tz, sc_venv
from .scenarios_sysadmin import sc_cron, sc_diskfull, sc_nginx, sc_perms, sc_ssh, sc_systemd


SCENARIOS = [sc_csv_pipeline, sc_ledger, sc_systemd, sc_make, sc_packaging, sc_git, sc_nginx, sc_perms,
             sc_accesslog, sc_diskfull, sc_cron, sc_tz, sc_sqlite, sc_ssh, sc_venv]


def build(fn, seed, long=False):
    return fn(random.Random(seed), long=long)
