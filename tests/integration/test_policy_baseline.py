"""``baseline.precision=policy``: bf16 FSDP2 against bf16 on one device, in real jobs.

With the default ``float32`` baseline a bf16 job differs from step 0 by the precision
itself; with ``policy`` the standalone copy runs the same ``MixedPrecisionPolicy`` on a
one-rank mesh and, with replicated data, the copies agree bit for bit on dp2 and dp4
(every rank computes the same bf16 gradients, and averaging equal values is exact).
"""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, culprits_named, run_cli

pytestmark = pytest.mark.slow


def _records(sweep_dir, n):
    return [json.loads((sweep_dir / str(i) / "result.json").read_text()) for i in range(n)]


def _by(records, mesh, precision):
    [record] = [r for r in records if r["config"]["mesh"]["name"] == mesh
                and r["config"]["baseline"]["precision"] == precision]
    return record


def test_bf16_fsdp2_matches_a_policy_baseline_bit_for_bit_and_still_differs_from_float32(tmp_path):
    proc = run_cli(["-m", "ablation=none", "steps=20", "mp_policy=bf16", "mesh=dp2,dp4",
                    "baseline.precision=policy,float32"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _records(tmp_path / "multirun", 4)
    for mesh in ("dp2", "dp4"):
        policy, fp32 = _by(records, mesh, "policy"), _by(records, mesh, "float32")
        # the policy baseline: every rank's losses equal the standalone copy's, bit for bit
        assert policy["status"] == "ok" and policy["ranks_agree"], policy["reason"]
        assert policy["losses"]["standalone"] == policy["losses"]["distributed"]
        assert policy["comparison"]["max_abs_diff"] == 0.0 and policy["comparison"]["first_diff_step"] is None
        assert all(r["max_abs_diff"] == 0.0 for r in policy["rank_comparisons"])
        ran = policy["dtypes"]["observed_standalone"]
        assert (ran["param_forward"], ran["output"], ran["grad"], ran["master"], ran["optimizer_state"]) == \
            ("bfloat16", "bfloat16", "float32", "float32", "float32")
        assert ran.get("reduce") is None  # one rank reduces nothing
        assert policy["dtypes"]["observed"]["param_forward"] == "bfloat16"
        # today's baseline, kept: the bf16 copy parts from the float32 one at step 0
        assert fp32["comparison"]["first_diff_step"] == 0 and fp32["comparison"]["max_abs_diff"] > 0
        assert fp32["dtypes"]["observed_standalone"]["param_forward"] == "float32"
        assert fp32["losses"]["standalone"] != policy["losses"]["standalone"]
    # each dp4 job took the dp2 job's baseline of its own precision, never the other's
    for precision in ("policy", "float32"):
        dp2, dp4 = _by(records, "dp2", precision), _by(records, "dp4", precision)
        assert dp2["baseline"] is None and dp4["baseline"]["source"] == "cache"
        assert dp4["baseline"]["job_dir"].endswith(f"/{records.index(dp2)}")
        assert dp4["dtypes"]["observed_standalone"] == dp2["dtypes"]["observed_standalone"]


@pytest.mark.exhaustive
def test_a_policy_baseline_in_its_own_process_with_per_layer_units(tmp_path):
    # order=separate: the standalone copy is sharded in a process of its own (a one-rank group)
    proc = run_cli(["steps=20", "mp_policy=bf16_bf16", "mesh=dp4", "wrap=per_layer", "order=separate",
                    "baseline.precision=policy"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "ok", record["reason"]
    assert record["losses"]["standalone"] == record["losses"]["distributed"]
    assert record["dtypes"]["observed_standalone"]["param_forward"] == "bfloat16"
    standalone = json.loads((tmp_path / "run" / "ranks" / "standalone.json").read_text())
    assert standalone["distributed"] is None and standalone["world_size"] == 1


@pytest.mark.parametrize("policy", ["bf16", "bf16_bf16"])
def test_the_one_rank_fully_shard_copy_is_pytorchs_own_mixed_precision_reference(policy):
    # tests/helpers/policy_reference.py: StandaloneFSDP2 vs a bf16 copy with fp32 master weights, no FSDP
    out = subprocess.run([sys.executable, "-m", "tests.helpers.policy_reference", "steps=30", f"mp_policy={policy}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["standalone"]) == 30 and result["standalone"] == result["reference"]
    assert result["observed"]["param_forward"] == "bfloat16" and result["observed"]["master"] == "float32"


def test_a_bf16_transformer_against_the_float32_baseline_is_pointed_at_the_policy_baseline(tmp_path):
    """A correct transformer under mp_policy=bf16 fails against the default float32 copy by the
    precision alone, within its rounding envelope: the headline names the tolerance this
    precision holds and baseline.precision=policy, and no
    "printed precision" note claims its bf16 losses were read from text (issue 38)."""
    proc = run_cli(["-m", "ablation=none", "model=transformer", "mp_policy=bf16", "steps=4", "optimizer=adam,sgd"],
                   tmp_path)
    summary = json.loads((tmp_path / "multirun" / "summary.json").read_text())
    assert [j["status"] for j in summary["jobs"]] == ["fail", "fail"], proc.stdout[-2000:]
    assert "baseline.precision=policy" in summary["headline"], summary["headline"]
    assert "baseline.precision=policy runs the standalone copy under the same policy" in summary["verdict"]
    assert [f["code"] for f in summary["findings"]][:2] == ["V000", "V109"] and not culprits_named(summary)
    for record in _records(tmp_path / "multirun", 2):
        assert not any(n.startswith("printed precision") for n in record["notes"]), record["notes"]
        assert record["resolution"] is None
