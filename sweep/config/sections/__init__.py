"""The sections of a job's config, one module each, named for the section's key (and its
``conf/`` group, where one fills it): the section's dataclass, its enums, each field's
role and doc, and its field-local checks (``check``). ``sweep.config.schema`` composes
them into the job's config and checks what spans sections.

Modules: ``framework``, ``engine``, ``mp_policy``, ``mesh``, ``optimizer``, ``model``,
``data``, ``train`` (with ``train.grad_scaler``), ``compare``, ``execution``, ``weights``,
``activation_checkpoint``, ``compile``, ``baseline``, ``runner`` (with ``runner.parse``);
``_checks`` (what their checks share).
"""
