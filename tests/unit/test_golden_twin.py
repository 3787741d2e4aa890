"""A golden file's twin stands in for the job's own only where it was nudged in the dtype the job
rounds in: a float32 job's twin under a bfloat16 job called that job's rounding a drift from step 1
(a new user's report); a bfloat16 twin under a float32 job would call a fault rounding."""

from __future__ import annotations

from sweep.run.baseline import golden_twin


def _config(param_dtype):
    return {"model": {"init_dtype": "float32"}, "baseline": {"precision": "float32"}, "data": {"split": "replicated"},
            "mp_policy": {"param_dtype": param_dtype, "reduce_dtype": None, "output_dtype": None}}


def test_a_twin_of_the_jobs_own_dtype_is_used_and_another_is_not():
    twin = {"losses": [1.0, 0.9], "dtype": "float32"}
    assert golden_twin(twin, _config(None)) == (twin, None)
    assert golden_twin(None, _config("bfloat16")) == (None, None)
    used, note = golden_twin(twin, _config("bfloat16"))
    assert used is None and note == ("the golden file's twin was nudged in float32, this job rounds in bfloat16: its "
                                     "rounding envelope comes from a twin trained here")
