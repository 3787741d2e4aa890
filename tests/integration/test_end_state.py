"""The copies' running statistics after the last step, compared on every job (issue 36 item
2): a BatchNorm frozen in the distributed copy leaves every training loss equal, yet the job
fails naming the buffer, on torch and on MindSpore, with the baseline cache on (the
standalone copy's buffers come from the cache)."""

import pytest

from tests.conftest import multirun_jobs

pytestmark = pytest.mark.slow

MODEL = "model._target_=tests.helpers.batchnorm_model.bn_mlp"


@pytest.mark.parametrize("framework, engines, buffer", [
    ("torch", "engine.impl.torch=sweep.engines.torch_fsdp2.TorchFSDP2,"
              "tests.helpers.batchnorm_model.FrozenStatsFSDP2", "bn.running_mean"),
    ("mindspore", "engine.impl.mindspore=sweep.engines.data_parallel.MindSporeGradReducer,"
                  "tests.helpers.batchnorm_model.FrozenStatsGradReducer", "bn.moving_mean"),
])
def test_a_frozen_running_statistic_is_named_as_a_buffer(tmp_path, framework, engines, buffer):
    extra = ["framework=mindspore", "engine=data_parallel", "device=cpu"] if framework == "mindspore" else []
    jobs, _ = multirun_jobs(tmp_path, *extra, MODEL, engines, "steps=8", "train.batch_size=8")
    correct, frozen = (jobs[0], jobs[1])
    assert correct["status"] == "ok", correct["reason"]
    assert correct["losses"]["standalone"] == frozen["losses"]["standalone"]  # the cached baseline
    assert frozen["losses"]["distributed"] == correct["losses"]["distributed"]  # every loss equal
    assert frozen["status"] == "fail" and frozen["baseline"]  # the standalone copy from the cache
    assert frozen["reason"].startswith(f"the copies end apart: rank 0: buffer {buffer} after the last step (7)")
    assert frozen["first_tensor"]["kind"] == "buffer" and frozen["first_tensor"]["name"] == buffer
    assert "the training losses do not read" in frozen["first_tensor"]["description"]
