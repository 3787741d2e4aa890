"""The analysis wing: pure numerics over records: the per-step comparison, the rounding envelope, the first differing tensor and the onset, the grid's evidence about factors, and isolation by ddmin.

Every rule that decides what a job's evidence means lives here (the real first step and the
onset, the first tensor and module over the ranks and their merge, the drift class, the
verdict of one run, the dtypes against the policy): the report formats what it returns and
the job records it.

May import: ``sweep.config`` and the contracts only; nothing that launches, trains or renders.
Modules: ``compare``, ``envelope``, ``rounding``, ``trace``, ``modules``, ``evidence``, ``judging``, ``dtypes``,
``collectives``, ``grid`` (factors, levels, one-factor pairs), ``culprits`` (candidates, ties,
interactions, fixes, contrasts: data), ``isolate``, ``bisect``. What the verdict says is the
findings wing's (``sweep.findings``); nothing here builds its sentences.
"""
