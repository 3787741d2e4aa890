"""The analysis wing: pure numerics over records: the per-step comparison, the first differing tensor and the onset, attribution of a drift to factors, and isolation by ddmin.

May import: ``sweep.config`` and the contracts only; nothing that launches, trains or renders.
Modules: ``compare``, ``trace``, ``attribution``, ``isolate``.
"""
