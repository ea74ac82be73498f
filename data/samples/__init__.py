"""The modules that write data/'s sample corpora, one per corpus or format; data/make_samples.py runs them.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
"""
