"""The report wing: what a person or a tool reads: the summary files and terminal table, plots, HTML, JUnit, sweep against sweep, isolation's report, DataFrames, golden baseline files.

It formats what ``sweep.analysis`` returns and decides nothing: no onset, first step or
class is defined here (``tests/unit/test_layout.py`` holds it to that).

May import: ``sweep.analysis``, ``sweep.config`` and the contracts; nothing that launches or trains.
Modules: ``summary`` (``python -m sweep.report``), ``plots``, ``html``, ``junit``, ``against``, ``isolate_report``, ``frame`` (``sweep.load``, ``sweep.load_steps``), ``golden`` (golden baseline files: ``--export-golden`` writes one, ``baseline.file`` reads one).
"""
