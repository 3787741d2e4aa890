"""Where the two runs part: first divergence, onset patterns, every rank judged, and a
verdict that never misleads, on constructed sequences and result sets."""

import numpy as np
import pytest

from sweep.report.findings import attribute
from sweep.analysis.compare import compare_losses, onset
from sweep.analysis.evidence import drift_class
from sweep.findings.places import tensor_text

N = 120
REF = 1.0 + 0.3 * np.sin(np.arange(N) / 7.0)


def _with(diff):
    return REF, REF + diff


def test_first_difference_is_exact_and_before_the_first_failure():
    d = np.zeros(N)
    d[50:] = 1e-7 * np.arange(N - 50) ** 2  # starts tiny at step 51, outside tolerance much later
    c = compare_losses(*_with(d), rtol=1e-4, atol=1e-4)
    assert c.first_diff_step == 51 and c.first_fail_step > 60
    assert compare_losses(*_with(d), rtol=1e-4, atol=1e-4, noise_floor=1e-5).first_diff_step > 51
    assert compare_losses(REF, REF, rtol=1e-4, atol=1e-4).first_diff_step is None


def _periodic():
    d = np.zeros(N)
    for s in range(20, N, 10):
        d[s:] += 1e-4
    return d


@pytest.mark.parametrize("make, pattern", [
    (lambda: np.zeros(N), "none"),
    (lambda: np.full(N, 1e-3), "step0"),
    (lambda: np.concatenate([np.zeros(40), np.full(N - 40, 5e-3) + 1e-6 * np.arange(N - 40)]), "abrupt"),
    (lambda: np.concatenate([np.zeros(40), 1e-7 * np.arange(N - 40) ** 2]), "growth"),
    (_periodic, "periodic"),
    (lambda: np.concatenate([np.zeros(30), np.random.default_rng(0).normal(0, 1e-5, N - 30)]), "noise"),
])
def test_onset_patterns(make, pattern):
    found = onset(*_with(make()))
    assert found["pattern"] == pattern
    if pattern == "periodic":
        assert found["period"] == 10 and found["first_diff_step"] == 20


def _row(job, status, overrides, first_diff=None, first_fail=None, max_abs=0.0, msd=0.0, notes=None, onset=None):
    return {"job": job, "overrides": overrides, "status": status, "reason": None, "first_fail_step": first_fail,
            "first_diff_step": first_diff, "mean_signed_diff": msd, "max_abs_diff": max_abs, "notes": notes,
            "onset": onset}


def test_a_late_failure_after_an_early_divergence_is_not_precision():
    row = _row(0, "fail", {}, first_diff=50, first_fail=93, max_abs=2e-4, onset="growth")
    assert drift_class(row) == "from_step"
    att = attribute([row, _row(1, "ok", {"o": "b"}), dict(row, job=2, overrides={"o": "a"})])
    assert "parts from standalone at step 50 (job 0; first outside tolerance at step 93), from_step" in att["verdict"]


def _beyond(row):
    """``row`` with a measured rounding envelope its losses leave from its first differing step."""
    from sweep.records import JobRecord

    loss = {"within": False, "first_beyond_step": row["first_diff_step"], "ratio": 30.0, "band": 1e-6, "sign": None}
    return dict(row, first_real_step=row["first_diff_step"], result=JobRecord(
        status=row["status"], envelope={"measured": True, "dtype": "float32", "margin": 4.0, "loss": loss,
                                        "other_failures": []}))


def test_a_factor_that_only_exposes_a_drift_is_not_called_its_cause():
    rows = []
    for job, (opt, mesh) in enumerate([("adam", "dp2"), ("sgd", "dp2"), ("adam", "dp4"), ("sgd", "dp4")]):
        fails = opt == "sgd"
        rows.append(_beyond(_row(job, "fail" if fails else "ok", {"optimizer": opt, "mesh": mesh}, first_diff=1,
                                 first_fail=1 if fails else None, max_abs=0.3 if fails else 3e-5,
                                 msd=-0.1 if fails else -1e-5)))
    verdict = attribute(rows)["verdict"]
    assert "Exposed by, not caused by: optimizer=sgd" in verdict and "Culprit" not in verdict
    assert "optimizer=sgd exposes it and optimizer=adam hides it below tolerance" in verdict
    # the passing jobs' differences not measured against rounding (a command job without repeats): a correct
    # script's rounding cannot be told from a hidden drift, so sgd is no exposer on it (a new user's DDP script,
    # 1e-7 of reduction order, made every real bug "exposed by, not caused by")
    unmeasured = [{k: v for k, v in r.items() if k not in ("result", "first_real_step")} for r in rows]
    verdict = attribute(unmeasured)["verdict"]
    assert "Culprit: optimizer=sgd" in verdict and "Exposed by" not in verdict


def test_ties_are_stated_whatever_order_the_factors_were_typed_in():
    def rows(order):
        out = []
        for job, (a, b) in enumerate([("x", "p"), ("y", "q"), ("x", "q"), ("y", "p")]):
            overrides = {"fa": a, "fb": b} if order else {"fb": b, "fa": a}
            bad = a == "y" and b == "q"
            out.append(_row(job, "fail" if bad else "ok", overrides, first_diff=3 if bad else None,
                            first_fail=3 if bad else None, max_abs=0.1 if bad else 0.0, msd=-0.1 if bad else 0.0))
        return out

    one, other = attribute(rows(True))["verdict"], attribute(rows(False))["verdict"]
    assert one == other
    # the full 2x2 grid holds the job that would separate them, and it passes: an interaction
    assert "Only together: fa=y and fb=q fail in the same jobs, and job 3 (fb=p) passes: an interaction" in one
    assert "Indistinguishable" not in one
    assert "Culprit" not in one and "an interaction, not one factor. fa=y: fails in" in one  # not one culprit
    # without that job, fa alone has a one-factor pair: it is the culprit, no tie is claimed
    verdict = attribute([r for r in rows(True) if r["job"] != 3])["verdict"]
    assert "Culprit: fa=y" in verdict and "Only together" not in verdict


def test_confounded_culprits_get_a_separating_job():
    rows = [_row(0, "ok", {"fa": "x", "fb": "p", "c": "1"}), _row(1, "fail", {"fa": "y", "fb": "q", "c": "1"},
                                                                   first_diff=2, first_fail=2, max_abs=0.1, msd=-0.1),
            _row(2, "ok", {"fa": "x", "fb": "p", "c": "2"}), _row(3, "fail", {"fa": "y", "fb": "q", "c": "2"},
                                                                   first_diff=2, first_fail=2, max_abs=0.1, msd=-0.1)]
    att = attribute(rows)
    assert att["culprits"] == [] and att["confounded"]["failing"] == 1 and att["confounded"]["passing"] == 0
    assert "differs in fa, fb together. Indistinguishable in this sweep: fa=y or fb=q (or only together); " \
           "to separate them, add the job c=1 fa=x fb=q." in att["verdict"]


def test_factors_that_scale_or_flip_the_drift_are_reported():
    rows = []
    for job, (mesh, order) in enumerate([("dp2", "a"), ("dp4", "a"), ("dp2", "b"), ("dp4", "b")]):
        size = 1e-3 * (2.8 if mesh == "dp4" else 1.0)
        sign = -1.0 if order == "a" else 1.0
        row = _row(job, "fail", {"mesh": mesh, "order": order}, first_diff=1, first_fail=1, max_abs=size,
                   msd=sign * size)
        row["runs_low_pct"] = 100.0 if sign < 0 else 0.0  # one sign on every step (no envelope measured here)
        rows.append(row)
    verdict = attribute(rows)["verdict"]
    assert "mesh=dp4 scales the drift 2.8x against mesh=dp2" in verdict
    assert "order=a flips its sign against order=b (2 of 2 pairs)" in verdict


def test_notes_reach_the_verdict_also_when_every_job_passes():
    rows = [_row(0, "ok", {"m": "bf16"}, notes="policy not applied (configured/ran bfloat16/-/- vs float32/?/?)"),
            _row(1, "ok", {"m": "fp32"})]
    verdict = attribute(rows)["verdict"]
    assert verdict.startswith("2 jobs: 2 ok. No job fails") and "Note: policy not applied (1 job)" in verdict


def test_a_clean_sweep_names_no_culprit_and_no_divergence():
    rows = [_row(j, "ok", {"o": o}) for j, o in enumerate("ab")]
    att = attribute(rows)
    assert att["verdict"] == "2 jobs: 2 ok. No job fails: every job equals standalone bit for bit."
    assert all(not jobs for jobs in att["drift"].values())


def test_every_rank_is_judged(compose_cfg):
    from sweep.config.schema import to_container
    from sweep.records import JobRecord, RankResult
    from sweep.run.judge import judge

    cfg = compose_cfg(["steps=4"])
    good = [1.0, 0.9, 0.8, 0.7]
    bad = [1.0, 0.9, 0.7, 0.6]

    def run(rank1):
        record = JobRecord(config=to_container(cfg), overrides=[])
        ranks = [RankResult(rank=0, world_size=2, framework="torch", standalone=good, distributed=good),
                 RankResult(rank=1, world_size=2, framework="torch", standalone=good, distributed=rank1)]
        judge(cfg, record, ranks, good)
        return record

    record = run(bad)
    assert record.status == "fail" and record.judged_rank == 1
    assert record.reason.startswith("rank 1: 2/4 steps outside rtol=0.0001, atol=0.0001; first at step 2")
    assert [r["passed"] for r in record.rank_comparisons] == [True, False]
    assert record.rank_comparisons[1]["first_diff_step"] == 2
    close = [1.0, 0.9, 0.8 + 1.5e-4, 0.7]  # within tolerance of standalone, 1.5e-4 off rank 0: still within
    assert run(close).status == "ok"
    assert run(good).status == "ok" and run(good).ranks_agree is True


def test_every_observed_dtype_is_checked_against_the_policy():
    from sweep.analysis.dtypes import dtype_evidence as typed
    from sweep.report.notes import text_of

    def dtype_evidence(record):  # the notes as the report renders them
        found = typed(record)
        assert all(n.code == "N160" for n in found["dtype_notes"])
        return dict(found, dtype_notes=[text_of(n) for n in found["dtype_notes"]])

    fp32 = {"param_dtype": None, "reduce_dtype": None, "output_dtype": None}
    ran_low = {"param_forward": "bfloat16", "reduce": "bfloat16", "grad": "float32", "master": "float32",
               "optimizer_state": "float32"}
    notes = dtype_evidence({"configured": fp32, "observed": ran_low})["dtype_notes"]
    assert notes == ["param forward dtype ran bfloat16, implied float32", "reduce dtype ran bfloat16, implied float32"]
    bf16 = {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": None}
    wrong_reduce = dict(ran_low, reduce="bfloat16", optimizer_state="bfloat16")
    notes = dtype_evidence({"configured": bf16, "observed": wrong_reduce})["dtype_notes"]
    assert notes == ["reduce dtype ran bfloat16, configured float32", "optimizer state dtype ran bfloat16, implied float32"]
    assert dtype_evidence({"configured": bf16, "observed": dict(ran_low, reduce="float32")})["dtype_notes"] == []


def test_a_shard_is_compared_with_the_matching_slice_of_the_full_tensor():
    from sweep.analysis.trace import locate, to_shards

    full = np.arange(8, dtype=np.float32).reshape(4, 2)
    standalone = [{"grad": {"w": full, "b": np.ones(3, np.float32)}}]
    rank1 = [{"grad": {"w": full[2:4].copy(), "b": np.ones(3, np.float32)}}]  # rank 1 of 2 holds rows 2-3
    assert locate(to_shards(standalone, rank1, rank=1), rank1, 0) == {"last_step": 0}
    assert tensor_text(locate(to_shards(standalone, rank1, rank=1), rank1, 0)) == "no tensor differs in steps 0-0"
    rank1[0]["grad"]["w"][1, 1] += 1.0
    found = locate(to_shards(standalone, rank1, rank=1), rank1, 0)
    assert (found["name"], found["kind"], found["abs_diff"]) == ("w", "grad", 1.0)


def _traces(n, fault, rounding=0.0, seed=0):
    """Two copies of SGD on a random quadratic with fresh random "gradient noise" per
    step (as fresh data would give), the distributed copy's update changed by
    ``fault(step, update, rng)`` (returns the update to apply) plus relative
    ``rounding``: traces as the ranks record them (``sweep.analysis.trace``)."""
    rng = np.random.default_rng(seed)
    target = rng.normal(size=64)
    samples = [rng.normal(size=64) for _ in range(n)]
    w0 = rng.normal(size=64)
    traces = []
    for copy in ("standalone", "distributed"):
        w, trace, noise = w0.copy(), [], np.random.default_rng(seed + 1)
        for step in range(n):
            entry = {"initial": {"w": w.copy()}} if step == 0 else {}
            u = -0.05 * (w - target + samples[step])
            if copy == "distributed":
                u = fault(step, u, noise) * (1 + rounding * noise.normal(size=64))
            w = w + u
            entry["weight"] = {"w": w.copy()}
            trace.append(entry)
        traces.append(trace)
    return traces


def _stale():
    """A fault that applies the previous step's update (none at step 0)."""
    previous = {}

    def fault(step, update, rng):
        applied = previous.get("update", np.zeros_like(update))
        previous["update"] = update
        return applied

    return fault


@pytest.mark.parametrize("fault, pattern, real, period", [
    (lambda s, u, rng: u, "none", None, None),
    (lambda s, u, rng: 2 * u, "abrupt", 0, None),  # a doubled update from the first step: every sign +
    (lambda s, u, rng: 2 * u if s >= 8 else u, "abrupt", 8, None),
    (lambda s, u, rng: 2 * u if s % 4 == 3 else u, "periodic", 3, 4),
    (lambda s, u, rng: u + (0.5 * np.linalg.norm(u) * rng.normal(size=u.size) if rng.random() < 0.3 else 0), "noise",
     None, None),
    (lambda s, u, rng: u * (1 + 1e-5 * 1.5 ** s), "growth", None, None),
    # an error of random direction on every step (a rank's shard left out of the mean): noise-like
    (lambda s, u, rng: u + 0.5 * np.linalg.norm(u) * rng.normal(size=u.size) / 8, "noise", 0, None),
    # an error with a direction on every step (the previous step's update applied): abrupt
    (_stale(), "abrupt", 0, None),
    # a lasting error with a peak every 5 steps (momentum cleared): periodic, though never quiet between
    (lambda s, u, rng: u * (0.2 if s % 5 == 4 else 1.5), "periodic", 0, 5),
    # momentum cleared every 5 steps as SGD shows it: a deficit at each clearing that decays, each
    # cycle's peak above the last but not above every later step (a sawtooth on a trend): periodic
    (lambda s, u, rng: u * (1 - (0.4 + 0.02 * s) * 0.7 ** ((s - 4) % 5)) if s >= 4 else u, "periodic", 4, 5),
    # up 5% on even steps, down 5% on odd ones: the size never changes, the sign alternates
    (lambda s, u, rng: u * (1.05 if s % 2 == 0 else 0.95), "periodic", 0, 2),
])
def test_onset_from_the_update_differences_on_fresh_data(fault, pattern, real, period):
    from sweep.analysis.trace import update_onset, update_series

    standalone, distributed = _traces(30, fault)
    found = update_onset(update_series(standalone, distributed))
    assert found["pattern"] == pattern
    if real is not None:
        assert found["real_step"] == real
    assert found["period"] == period


@pytest.mark.parametrize("fault, real, until", [
    (lambda s, u, rng: 2 * u if 5 <= s <= 7 else u, 5, 7),  # doubled on steps 5-7 only, then correct again
    (lambda s, u, rng: 0 * u if s == 0 else u, 0, 0),  # the first update skipped (a warmup off by one)
    (lambda s, u, rng: 1.01 * u if s == 10 else u, 10, 10),  # one step's forward off by 1%
])
def test_a_fault_on_a_few_steps_is_abrupt_and_over_not_noise(fault, real, until):
    # what differs after it is its aftermath (the copies' weights differ): small, of either sign
    from sweep.analysis.trace import update_onset, update_series

    found = update_onset(update_series(*_traces(30, fault)))
    assert (found["pattern"], found["real_step"], found["until"]) == ("abrupt", real, until)


def test_an_error_of_one_sign_is_real_where_it_leaves_the_twins_envelope_and_rounding_within_it():
    """Every update 3e-5 too large, one sign on every step: against a twin whose update errors
    are 1e-7 (float32 rounding), real from its first step; against a twin whose errors are as
    large (a lower precision's rounding), within the envelope: rounding, whatever its sign."""
    from sweep.analysis.trace import locate, update_onset, update_series

    standalone, distributed = _traces(30, lambda s, u, rng: u * (1 + 3e-5))
    _, twin = _traces(30, lambda s, u, rng: u, rounding=1e-7)
    _, loud = _traces(30, lambda s, u, rng: u, rounding=1e-4)
    series = update_series(standalone, distributed)
    found = update_onset(series, update_series(standalone, twin)["rel"])
    assert (found["pattern"], found["real_step"]) == ("abrupt", 0)
    assert update_onset(series, update_series(standalone, loud)["rel"])["pattern"] == "none"
    assert "x its rounding envelope" in tensor_text(locate(standalone, distributed, 29, twin=twin))


def test_sparse_noise_whose_aftermath_errs_one_way_is_noise_by_size():
    """Noise on a quarter of the steps: the steps between carry its effect with one sign
    (60% of the signs agree here), but the noisy steps dominate the size."""
    from sweep.analysis.trace import NOISE_BALANCE, update_onset, update_series

    def fault(step, update, rng):
        noisy = step == 0 or rng.random() < 0.25
        return update + (0.5 * np.linalg.norm(update) * rng.normal(size=update.size) / 8 if noisy else 0)

    series = update_series(*_traces(25, fault, seed=22))
    along = np.asarray(series["along"])
    assert abs(np.mean(np.sign(along))) >= NOISE_BALANCE  # by count alone it would not be noise
    assert update_onset(series)["pattern"] == "noise"


def test_float_rounding_alone_is_within_the_envelope_and_a_fault_after_it_is_real_from_its_step():
    from sweep.analysis.trace import update_onset, update_series

    standalone, _ = _traces(30, lambda s, u, rng: u)
    _, twin = _traces(30, lambda s, u, rng: u, rounding=1e-7, seed=0)
    grown = update_series(standalone, twin)["rel"]
    found = update_onset(update_series(*_traces(30, lambda s, u, rng: u, rounding=1e-7)), grown)
    assert found["pattern"] == "none" and found["first_step"] == 0 and found["real_step"] is None
    late = update_onset(update_series(*_traces(30, lambda s, u, rng: 2 * u if s >= 8 else u, rounding=1e-7)), grown)
    assert (late["pattern"], late["first_step"], late["real_step"]) == ("abrupt", 0, 8)


def test_the_drift_class_follows_the_first_difference_beyond_rounding():
    row = _row(0, "fail", {}, first_diff=0, first_fail=12, max_abs=2e-4, onset="abrupt")
    assert drift_class(row) == "step0"
    row["first_real_step"] = 9  # the losses differ by rounding from step 0, a fault from step 9
    assert drift_class(row) == "from_step"
    att = attribute([row, _row(1, "ok", {"o": "b"}), dict(row, job=2, overrides={"o": "a"})])
    assert "parts from standalone at step 0 (job 0; by float rounding, beyond it from step 9; first outside " \
           "tolerance at step 12), from_step" in att["verdict"]


def test_initial_weights_that_differ_are_the_first_difference():
    from sweep.analysis.trace import locate

    w = np.ones(4, np.float32)
    standalone = [{"initial": {"w": w}, "grad": {"w": w}, "weight": {"w": w}}]
    distributed = [{"initial": {"w": w + 1e-3}, "grad": {"w": w + 1e-3}, "weight": {"w": w + 1e-3}}]
    found = locate(standalone, distributed, 0)
    assert (found["kind"], found["step"]) == ("initial", 0) and not found["weights_identical_before"]
    assert tensor_text(found).startswith("w initial weights (before any step)")


def test_the_first_tensor_names_the_shard_and_ranks_that_differ():
    """A fault in one rank's dim-0 shard of a gathered tensor: the first tensor says which
    shard (torch.chunk's split) and which ranks hold it; a fault in every shard says none."""
    from sweep.analysis.trace import Search, differing_shards, first_difference

    w = np.arange(10 * 3, dtype=np.float64).reshape(10, 3)
    bad = w.copy()
    bad[9, 1] += 1.0  # chunks of ceil(10 / 4) = 3 rows: row 9 is in shard 3
    assert differing_shards(w, bad, 4) == [3] and differing_shards(w, w, 4) == []
    trace = lambda x: [{"initial": {"w": w}, "weight": {"w": x}}]  # noqa: E731
    found = first_difference(trace(w), trace(bad), Search(rank=5, layout={"w": 4}))
    # mesh (replicate 2, shard 4): rank 5 gathers from ranks 4-7, shard 3 is rank 7's
    assert found["shards"] == {"of": 4, "differ": [3], "ranks": [7]}
    assert tensor_text(found).endswith("; only dim-0 shard 3 of 4 differs, held by rank 7")
    bad[0, 0] += 1.0
    assert first_difference(trace(w), trace(bad), Search(layout={"w": 4}))["shards"]["ranks"] == [0, 3]
    assert "shards" not in first_difference(trace(w), trace(w + 1.0), Search(rank=2, layout={"w": 4}))
    assert "shards" not in first_difference(trace(w), trace(bad))  # no layout: not sharded


def test_one_shard_is_named_beyond_rounding_only_where_the_others_stay_within_rounding_itself():
    """A fault in shard 1 with shard 0 at the twin's rounding names shard 1; a fault that reaches
    every shard, just under the envelope's bound in shard 0 (an every-rank gradient scale of 1e-6
    on SGD, a new user's), names none: shard 0 is apart from rounding too, not within it."""
    from sweep.analysis.envelope import EnvelopeSetting
    from sweep.analysis.trace import Search, locate

    w = 1.0 + np.arange(8 * 2, dtype=np.float64).reshape(8, 2) / 16
    steps = lambda first, second: [{"initial": {"w": w}, "weight": {"w": first}}, {"weight": {"w": second}}]  # noqa
    standalone, twin = steps(w, w), steps(w + 1e-6, w + 1e-6)  # bound: 4 x the twin's 1e-6 (abs, here)

    def beyond(shard0: float) -> dict:
        second = w.copy()
        second[:4] += shard0
        second[4:] += 1e-4
        found = locate(standalone, steps(w + 1e-7, second), 1, Search(layout={"w": 2}), twin=twin,
                       envelope=EnvelopeSetting(4.0, "float32"))
        assert found["step"] == 0 and found["beyond_rounding"]["step"] == 1, found
        return found["beyond_rounding"]

    assert beyond(1e-7)["shards"] == {"of": 2, "differ": [1], "ranks": [1], "beyond": True}
    assert "shards" not in beyond(3e-6)  # under the bound (4e-6), over the twin's own difference


def test_initial_weights_and_buffers_name_the_shard_and_rank_that_differ():
    """A per-rank init seed: only the shard rank 1 holds starts otherwise; its telling fact,
    the rank, reaches the description of initial weights and buffers too (issue 38)."""
    from sweep.analysis.trace import Search, first_difference

    w = np.arange(8 * 2, dtype=np.float64).reshape(8, 2)
    bad = w.copy()
    bad[4:] += 0.5  # rows 4..7: dim-0 shard 1 of 2
    found = first_difference([{"initial": {"w": w}}], [{"initial": {"w": bad}}], Search(rank=0, layout={"w": 2}))
    assert found["kind"] == "initial" and found["shards"]["ranks"] == [1]
    assert tensor_text(found).startswith("w initial weights (before any step)")
    assert tensor_text(found).endswith("; only dim-0 shard 1 of 2 differs, held by rank 1")
    found = first_difference([{"initial_buffer": {"m": w}}], [{"initial_buffer": {"m": bad}}], Search(layout={"m": 2}))
    assert tensor_text(found).endswith("; only dim-0 shard 1 of 2 differs, held by rank 1"), found


def test_noise_without_repeats_says_how_to_tell_nondeterminism():
    row = _row(0, "fail", {"o": "b"}, first_diff=3, first_fail=9, max_abs=2e-4, onset="noise")
    verdict = attribute([row, _row(1, "ok", {"o": "a"})])["verdict"]
    assert "update errors of both signs (noise only if repeats disagree: repeat=3 tells nondeterminism from a " \
           "deterministic cause)" in verdict
    assert "random-sign noise" not in verdict  # a deterministic fault can take both signs: not called noise
    repeated = attribute([dict(row, nondeterministic=False), _row(1, "ok", {"o": "a"})])["verdict"]
    assert "deterministic (its repeats agree): not noise" in repeated and "repeat=3 tells" not in repeated
    noisy = attribute([dict(row, nondeterministic=True), _row(1, "ok", {"o": "a"})])["verdict"]
    assert "random-sign noise (its repeats disagree)" in noisy


def test_a_large_one_signed_error_is_not_outvoted_by_many_tiny_mixed_sign_steps():
    """Weighed by size (issue 38): a fault large and one-signed for two updates, then fading
    into many tiny steps of both signs, is no noise; equal-sized random signs still are."""
    from sweep.analysis.trace import update_onset

    tiny = [2e-4 * (-1) ** t for t in range(12)]
    fading = {"rel": [0.2, 0.15] + [abs(x) for x in tiny], "along": [0.2, 0.15] + tiny}
    assert update_onset(fading)["pattern"] != "noise"
    signs = [1, -1, -1, 1, -1, 1, 1, -1, 1, -1, -1, 1]
    mixed = {"rel": [0.01] * 12, "along": [0.01 * s for s in signs]}
    assert update_onset(mixed)["pattern"] == "noise"


def test_a_weight_past_the_recorded_gradients_makes_no_claim_about_them():
    from sweep.analysis.trace import first_difference

    w = np.ones(4)
    ours = [{"initial": {"w": w}, "grad": {"w": w}, "weight": {"w": w}}, {"weight": {"w": w}}]
    theirs = [{"initial": {"w": w}, "grad": {"w": w}, "weight": {"w": w}}, {"weight": {"w": 2 * w}}]
    found = first_difference(ours, theirs)
    assert found["step"] == 1 and not found["grads_recorded"]
    assert "identical" not in tensor_text(found) and "past the steps whose gradients are recorded" in \
        tensor_text(found)
    theirs[0]["weight"] = {"w": 2 * w}
    assert "gradients of that step identical (as reduced)" in tensor_text(first_difference(ours, theirs))


def test_a_gradient_that_is_zero_up_to_rounding_is_rounding_whatever_its_own_relative_difference():
    """A bias feeding a normalisation has a gradient of rounding noise: its own relative
    difference is O(1), against the largest gradient it is rounding (issue 24), and within its
    twin's envelope, which rounds it alike."""
    from sweep.analysis.trace import NEAR_ZERO, locate

    rng = np.random.default_rng(0)
    w = rng.standard_normal(8)
    big = rng.standard_normal(8) * 1e-2
    noise = rng.standard_normal(4) * 1e-10  # the bias: zero up to rounding
    step = {"initial": {"layer0.weight": w, "layer1.bias": np.zeros(4)},
            "grad": {"layer0.weight": big, "layer1.bias": noise}}
    other = {"initial": step["initial"], "grad": {"layer0.weight": big.copy(), "layer1.bias": -0.7 * noise}}
    twin = {"initial": step["initial"], "grad": {"layer0.weight": big * (1 + 1e-7), "layer1.bias": 0.5 * noise}}
    found = locate([step], [other], 0, twin=[twin])
    assert found["name"] == "layer1.bias" and found.get("near_zero") is True
    assert found["rel_diff"] < 1e-6 and found["beyond_rounding"] is None
    assert "zero up to rounding" in tensor_text(found) and "within its rounding envelope" in tensor_text(found)
    # a real fault in a small tensor (above NEAR_ZERO of its kind) is still beyond its envelope
    small = np.full(4, 10 * NEAR_ZERO * 1e-2)
    faulty = locate([dict(step, grad={"layer0.weight": big, "layer1.bias": small})],
                    [dict(other, grad={"layer0.weight": big, "layer1.bias": 2 * small})], 0,
                    twin=[dict(twin, grad={"layer0.weight": big, "layer1.bias": small * (1 + 1e-7)})])
    assert faulty["name"] == "layer1.bias" and not faulty.get("near_zero") and faulty["rel_diff"] == pytest.approx(1.0)
    assert "beyond_rounding" not in faulty


def test_a_job_is_judged_by_its_worst_rank_not_rank_0():
    from sweep.analysis.judging import worst_rank

    ref = np.linspace(1.0, 0.5, 40)
    late = ref.copy()
    late[33:] += 1e-2  # rank 0: a buffer's effect reaches it through the reduction at step 33
    early = ref + 1e-2  # ranks 1-3: their own buffer is wrong from step 0
    comparisons = {0: compare_losses(ref, late, rtol=1e-4, atol=1e-4), 1: compare_losses(ref, early, rtol=1e-4, atol=1e-4), 2: compare_losses(ref, early + 1e-3, rtol=1e-4, atol=1e-4),
                   3: compare_losses(ref, early, rtol=1e-4, atol=1e-4)}
    assert worst_rank(comparisons) == 2  # the earliest failure, then the largest difference
    passing = {0: compare_losses(ref, ref, rtol=1e-4, atol=1e-4), 1: compare_losses(ref, ref + 1e-7, rtol=1e-4, atol=1e-4), 2: compare_losses(ref, ref, rtol=1e-4, atol=1e-4)}
    assert worst_rank(passing) == 1






def test_a_gradient_only_one_copy_has_is_said_so_not_called_unrecorded():
    from sweep.analysis.trace import locate

    w = np.ones(3)
    standalone = [{"initial": {"a": w, "b": w}, "grad": {"b": w}, "weight": {"a": w, "b": w - 0.1}}]
    distributed = [{"initial": {"a": w, "b": w}, "grad": {"a": w, "b": w}, "weight": {"a": w - 0.1, "b": w - 0.1}}]
    found = locate(standalone, distributed, 0)  # "a" is frozen in the standalone copy only
    assert (found["name"], found["kind"], found["grad_only_in"]) == ("a", "weight", "distributed")
    assert "only the distributed copy has a gradient for it at that step: requires_grad" in tensor_text(found)
    assert "past the steps" not in tensor_text(found)
    # a copy with no gradient at all (FSDP2's replicate all-reduce switched off: the reduced gradients never reach
    # the optimizer, which steps without them): said so, not "gradients of that step identical"
    none = [{"initial": {"a": w}, "grad": {}, "weight": {"a": w}}]
    found = locate([{"initial": {"a": w}, "grad": {"a": w}, "weight": {"a": w - 0.1}}], none, 0)
    assert (found["kind"], found["grad_only_in"]) == ("weight", "standalone")
    assert "the engine never handed the optimizer the reduced gradient" in tensor_text(found)
    assert "identical" not in tensor_text(found)


def test_a_job_without_a_measured_envelope_is_real_from_its_first_difference_and_never_rounding():
    """runner=command: no twin can run, so nothing is called rounding: the first differing
    step is real, whatever its size (a mean over the ranks rounding apart by 1e-8 included)."""
    from types import SimpleNamespace

    from sweep.analysis.evidence import real_onset, rounding_only

    unmeasured = {"measured": False, "why": "runner=command: no twin can run"}
    assert real_onset(0, {"note": "not observed (runner=command)"}, unmeasured)["first_real_step"] == 0
    row = {"status": "ok", "first_diff_step": 0, "first_real_step": 0,
           "result": SimpleNamespace(envelope=unmeasured, notes=[])}
    assert not rounding_only(row) and drift_class(row) == "step0"


def test_a_tie_whose_separating_job_carries_the_drift_below_tolerance_exposes_it_and_is_no_interaction():
    # the fault lives in one mesh; sgd shows it, adam hides it below tolerance (job 2 differs from step 1)
    for mesh_key in ("mesh", "zmesh"):  # the factors' names never decide which one is the cause
        rows = []
        for job, (opt, mesh) in enumerate([("adam", "dp4"), ("sgd", "dp4"), ("adam", "hsdp2x2"), ("sgd", "hsdp2x2")]):
            fails, hidden = (opt, mesh) == ("sgd", "hsdp2x2"), (opt, mesh) == ("adam", "hsdp2x2")
            row = _row(job, "fail" if fails else "ok", {"optimizer": opt, mesh_key: mesh},
                       first_diff=1 if fails or hidden else None, first_fail=1 if fails else None,
                       max_abs=0.3 if fails else 3e-5 if hidden else 0.0, msd=-0.1 if fails else -1e-5 if hidden else 0.0)
            rows.append(_beyond(row) if fails or hidden else row)
        att = attribute(rows)
        assert f"Culprit: {mesh_key}=hsdp2x2" in att["headline"] and "interaction" not in att["headline"]
        assert "exposed by optimizer=sgd, which optimizer=adam hides below tolerance" in att["headline"]
        assert "interaction" not in att["verdict"] and "Only together" not in att["verdict"]
        assert ("optimizer=sgd exposes it, it does not cause it: job 2 (optimizer=adam) passes but differs from "
                "standalone too, below tolerance (max |diff| 3e-05, from step 1)") in att["verdict"]
        assert f"Fix proven by this sweep: {mesh_key}=dp4" in att["verdict"]


def test_no_scale_or_sign_contrast_rests_on_losses_within_their_envelope():
    """A faulty job that Adam keeps within its envelope (its gradient scaled, its losses at
    rounding's size and sign) against one that fails under sgd: no 'scales the drift' nor
    'flips its sign' (a tester's PerLayerScale sweep said both, 996x), though its traced
    tensor keeps it from being rounding only (issue 41, issue 49 item 4)."""
    from sweep.analysis.rounding import losses_within
    from sweep.records import JobRecord

    rows = []
    for job, opt in enumerate(("adam", "sgd")):
        hidden = opt == "adam"
        size = 2.1e-7 if hidden else 2e-4
        row = _row(job, "ok" if hidden else "fail", {"optimizer": opt}, first_diff=0, first_fail=None if hidden else 1,
                   max_abs=size, msd=-4e-9 if hidden else 1e-4)
        loss = {"within": hidden, "first_beyond_step": None if hidden else 1, "ratio": 0.4 if hidden else 90.0,
                "sign": None if hidden else "high"}
        row.update(first_real_step=1, result=JobRecord(status=row["status"], envelope={"measured": True,
                                                                                        "loss": loss}))
        rows.append(row)
    verdict = attribute(rows)["verdict"]
    assert "scales the drift" not in verdict and "flips its sign" not in verdict
    assert losses_within(rows[0]) and not losses_within(rows[1])


def test_searched_beyond_the_envelope_the_step_before_is_within_it_never_identical():
    """A weight found beyond its envelope may follow gradients that differ within theirs: its
    description says so ("within their rounding envelope"), never "identical"."""
    from sweep.analysis.trace import first_difference

    standalone = [{"grad": {"w": [1.0, 2.0]}, "weight": {"w": [0.5, 0.5]}}]
    distributed = [{"grad": {"w": [1.0, 2.0 + 1e-7]}, "weight": {"w": [0.5, 0.65]}}]
    bounds = {(0, "grad", "w"): 1e-6, (0, "weight", "w"): 1e-6}
    beyond = first_difference(standalone, distributed, bounds=bounds)
    assert beyond["kind"] == "weight" and "gradients of that step within their rounding envelope" in \
        tensor_text(beyond) and "identical" not in tensor_text(beyond)
    exact = first_difference(standalone, [{"grad": {"w": [1.0, 2.0]}, "weight": {"w": [0.5, 0.65]}}])
    assert "gradients of that step identical (as reduced)" in tensor_text(exact)


def test_a_fault_that_fades_keeping_its_sign_is_not_over():
    """A one-signed fault that fades smoothly (an lr x(1 + 0.5 * 0.7^t)) or lasts keeps its sign
    along the updates after its large steps (by count): still there, never "over after update N".
    The aftermath of one that stopped (a single doubled step, a skipped one) takes both signs: over."""
    from sweep.analysis.trace import update_onset

    fading = [0.5 * 0.7 ** t for t in range(20)]
    found = update_onset({"rel": fading, "along": fading})
    assert "until" not in found and found["pattern"] == "abrupt" and found["real_step"] == 0
    stopped_along = [1.0] + [(-1) ** t * 1e-3 for t in range(1, 20)]
    stopped = update_onset({"rel": [abs(a) for a in stopped_along], "along": stopped_along})
    assert stopped["until"] == 0 and stopped["pattern"] == "abrupt"
    # a lasting scale of one rank's gradients under Adam (a new user's DDP comm hook, x1.1 on rank 1 every step):
    # the first update's difference peaks, then stays level at a fifth of it, one-signed but for one step: still
    # there, not over (it read "over after update 3" when every step had to keep the sign)
    rel = [0.187, 0.069, 0.054, 0.047] + [0.041] * 15 + [0.037]
    along = [-0.017, -0.003, -0.002, -0.001] + [-0.003] * 15 + [0.0004]
    lasting = update_onset({"rel": rel, "along": along}, [4.5e-4 / 4])
    assert "until" not in lasting and lasting["pattern"] == "abrupt" and lasting["real_step"] == 0
    # a skipped first update under SGD: its aftermath takes both signs, one of its steps far larger than the rest
    after = [(-1) ** t * 2e-4 for t in range(1, 25)]
    after[20] = -0.024
    skipped = update_onset({"rel": [1.0] + [0.002] * 20 + [0.15] + [0.002] * 3, "along": [-1.0] + after})
    assert skipped["until"] == 0


def test_buffers_after_the_last_step_differ_beyond_their_envelope_only():
    from sweep.analysis.trace import final_buffers

    ours = {"bn.running_mean": [0.1, 0.2], "bn.running_var": [1.0, 1.0]}
    twin = {"bn.running_mean": [0.1 + 2e-9, 0.2], "bn.running_var": [1.0, 1.0 + 1e-9]}
    rounded = {"bn.running_mean": [0.1 + 1e-9, 0.2], "bn.running_var": [1.0, 1.0]}
    assert final_buffers(ours, rounded, 9, twin=twin) is None
    assert final_buffers(ours, rounded, 9) is not None  # no twin: any difference counts
    found = final_buffers(ours, {"bn.running_mean": [0.0, 0.0], "bn.running_var": [1.0, 1.0]}, 9, twin=twin)
    assert found["kind"] == "buffer" and found["name"] == "bn.running_mean" and found["step"] == 9
    assert tensor_text(found).startswith("buffer bn.running_mean after the last step (9), abs 0.2, rel 1 (")



def test_a_tensor_within_its_envelope_says_which_tensor_sets_that_envelope():
    """A new user's ViT under Adam: one attention bias no gradient moves differs by rel 0.15 from
    its twin, and that sets every weight's envelope (pooled over the kind): a real fault in
    norm.weight read as "within its rounding envelope" with nothing to tell why. It now names
    the tensor that sets the bound."""
    from sweep.analysis.envelope import EnvelopeSetting
    from sweep.analysis.trace import Search, locate

    w, b = np.ones((4, 2)), np.full(3, 0.01)

    def steps(wd, bd, later):
        return [{"initial": {"w": w, "b": b}, "weight": {"w": w + wd, "b": b + bd}}, {"weight": {"w": later, "b": b}}]

    found = locate(steps(0, 0, w), steps(1e-5, 0, w + 1.0), 1, Search(), twin=steps(1e-7, 1e-3, w),
                   envelope=EnvelopeSetting(4.0, "float32"))
    assert found["bound_set_by"] == {"name": "b", "step": 0, "rel": pytest.approx(0.1)}, found
    assert tensor_text(found).startswith("w weight at step 0, abs 1e-05, rel 1e-05 (within its rounding envelope, "
                                         "which b sets for every weight: rel 0.1 from its twin at step 0)")
    own = locate(steps(0, 0, w), steps(0, 5e-4, w + 1.0), 1, Search(), twin=steps(1e-7, 1e-3, w),
                 envelope=EnvelopeSetting(4.0, "float32"))
    assert own["name"] == "b" and "bound_set_by" not in own  # its own rounding: nothing more to say
