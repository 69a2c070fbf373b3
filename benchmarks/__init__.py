"""Benchmarks of the `workflows` library against the emulator: ``scripts/bench`` runs them all.

Every figure is a ratio against a baseline measured in the same run, or a count; absolute
times are kept in each figure's ``detail`` only. See ``benchmarks/run.py`` for the table of
figures and ``benchmarks/results.json`` for the latest results.
"""
