"""MindSpore first-class (issue 36): the PyTorch path's evidence on real msrun jobs, with
faults planted in the distributed copy by test-only engines (tests/helpers/ms_faults.py):
a later layer's forward fault by module, a frozen BatchNorm statistic as a buffer, a
reduction that sums by its factor, an optimizer hyper-parameter changed in one copy, and
the records no MindSpore job leaves empty. One multirun of named cases (the fast path)."""

import pytest

from tests.conftest import case_jobs

pytest.importorskip("mindspore")
pytestmark = [pytest.mark.slow, pytest.mark.mindspore]

FAULTS = "engine.impl.mindspore=tests.helpers.ms_faults."
CASES = {
    "later": [FAULTS + "LaterLayerForwardDP"],
    "frozen": [FAULTS + "FrozenStatsDP", "model=mlp_norm"],
    "sum": [FAULTS + "SumReduceDP", "optimizer=sgd"],
    "eps": [FAULTS + "EpsOverrideDP"],
    "clean": [],
}


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    return case_jobs(tmp_path_factory.mktemp("ms_inside"), CASES, "ablation=none", "framework=mindspore",
                     "engine=data_parallel", "steps=6")[0]


@pytest.fixture(scope="module")
def jobs(found):
    return {name: record for name, (record, _) in found.items()}


def test_a_later_layers_forward_fault_is_named_at_that_layers_output(jobs):
    record = jobs["later"]
    assert record["status"] == "fail", record["reason"]
    found = record["first_module"]
    assert found["module"] == "layer1" and found["phase"] == "forward" and found["step"] == 0, found
    assert found["description"].startswith("layer1 forward output at step 0, inputs agree")
    assert record["first_tensor"]["name"].startswith("layer1."), record["first_tensor"]


def test_the_trace_holds_every_traced_tensor_per_step_as_torchs_does(found):
    # one tracing function for both frameworks (sweep.train.traced): MindSpore's ranks write the
    # per-step tensor rows too, each against its rounding envelope
    import sweep

    frame = sweep.load_trace(found["later"][1])
    tensors = frame[frame.what == "tensor"]
    assert set(tensors.phase) >= {"grad", "weight"} and set(tensors["rank"]) == {0, 1}, tensors.head()
    first = tensors[(tensors.step == 0) & (tensors.phase == "grad")]
    assert first[first.name.str.startswith("layer1.")].rel.max() > 0, first


def test_a_frozen_batchnorm_statistic_is_named_as_a_buffer(jobs):
    record = jobs["frozen"]
    assert record["status"] == "fail", record["reason"]
    tensor = record["first_tensor"]
    assert tensor["kind"] == "buffer" and tensor["name"].startswith("norm1.moving_"), tensor


def test_a_reduction_that_sums_is_named_with_its_factor(jobs):
    record = jobs["sum"]
    assert record["status"] == "fail", record["reason"]
    assert "x2 = world_size" in record["first_tensor"]["description"], record["first_tensor"]


def test_an_optimizer_hyper_parameter_changed_in_one_copy_is_named(jobs):
    notes = jobs["eps"]["optimizer"]["notes"]
    assert any(n.startswith("optimizer eps ran 0.001 in the distributed copy (param group 0), configured 1e-08")
               for n in notes), notes
    assert jobs["clean"]["optimizer"]["notes"] == []


def test_no_mindspore_record_is_left_empty(jobs):
    clean = jobs["clean"]
    assert clean["status"] == "ok" and clean["losses"]["standalone"] == clean["losses"]["distributed"]
    for record in jobs.values():
        assert record["random_draws"] is False  # an MLP draws nothing, and says so
        assert record["optimizer"]["distributed"]  # the standalone copy's where it trained in this job's launch
        assert record["optimizer"].get("standalone") or (record["baseline"] or {}).get("source") == "cache"
        assert record["replicas"]["groups"] == [[0, 1]] and record["replicas"]["first_step"] is None
        assert record["dtypes"]["observed"]["param_forward"] == "float32"
        assert record["dtypes"]["observed_standalone"] or (record["baseline"] or {}).get("source") == "cache"
