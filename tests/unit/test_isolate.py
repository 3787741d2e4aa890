"""ddmin (sweep.analysis.isolate) on constructed pass/fail oracles."""

from __future__ import annotations

import pytest

from sweep.analysis.isolate import ERROR, FAIL, PASS, UNRESOLVED, combine, ddmin, split
from sweep.report.isolate_report import reason_text


class Oracle:
    """Fails when the probe holds every change of any one of ``causes``; records batches."""

    def __init__(self, causes, noisy=(), errors=()):
        self.causes = [set(c) for c in causes]
        self.noisy = {tuple(sorted(s)) for s in noisy}
        self.errors = {tuple(sorted(s)) for s in errors}
        self.batches = []

    def verdict(self, subset):
        if subset in self.noisy:
            return UNRESOLVED
        if subset in self.errors:
            return ERROR
        return FAIL if any(c <= set(subset) for c in self.causes) else PASS

    def __call__(self, subsets, phase):
        self.batches.append((phase, list(subsets)))
        return [self.verdict(s) for s in subsets]

    @property
    def probes(self):
        return sum(len(b) for _, b in self.batches)


def test_split_contiguous_near_equal():
    assert split((0, 1, 2, 3, 4), 2) == [(0, 1, 2), (3, 4)]
    assert split((0, 1, 2, 3, 4), 4) == [(0, 1), (2,), (3,), (4,)]
    with pytest.raises(ValueError, match="n=6"):
        split((0, 1), 6)


@pytest.mark.parametrize("cause", [0, 3, 7, 15])
def test_one_factor(cause):
    oracle = Oracle([{cause}])
    result = ddmin(16, oracle)
    assert result.minimal == (cause,)
    assert result.status == "isolated" and result.one_minimal and not result.interaction
    assert oracle.probes <= 2 + 2 * 4  # endpoints + two probes per halving: O(log N)


def test_two_interacting_factors():
    oracle = Oracle([{1, 6}])  # neither alone fails
    result = ddmin(8, oracle)
    assert result.minimal == (1, 6)
    assert result.interaction and result.one_minimal
    assert result.verdicts[(1,)] == PASS and result.verdicts[(6,)] == PASS
    assert oracle.batches[0] == ("endpoints", [(), tuple(range(8))])


def test_interaction_in_one_half():
    result = ddmin(5, Oracle([{0, 1}]))  # the seed hypotheses: weights.transfer + order
    assert result.minimal == (0, 1) and result.one_minimal
    assert len(result.probes) == 2 + 2 + 2 + 2


def test_three_way_interaction():
    result = ddmin(6, Oracle([{0, 2, 5}]))
    assert result.minimal == (0, 2, 5) and result.one_minimal


def test_batches_are_deterministic_and_never_repeat_a_probe():
    a, b = Oracle([{2, 5}]), Oracle([{2, 5}])
    ddmin(7, a)
    ddmin(7, b)
    assert a.batches == b.batches
    flat = [s for _, batch in a.batches for s in batch]
    assert len(flat) == len(set(flat))


def test_noisy_oracle_is_routed_around():
    # The subset {0, 1, 2} (which holds the cause) is flaky: it must not count as a
    # fail, nor as a pass; ddmin reaches the cause another way.
    oracle = Oracle([{1}], noisy=[(0, 1, 2)])
    result = ddmin(6, oracle)
    assert result.minimal == (1,)
    assert result.verdicts[(0, 1, 2)] == UNRESOLVED
    assert result.one_minimal


def test_unresolved_removal_leaves_minimality_unproven():
    # {0, 1} fails; {0} alone is flaky: the answer stands, but not as proven 1-minimal in 1.
    oracle = Oracle([{0, 1}], noisy=[(0,)])
    result = ddmin(2, oracle)
    assert result.minimal == (0, 1)
    assert not result.one_minimal and result.unproven == (1,)


def test_errored_probes_are_routed_around():
    oracle = Oracle([{4}], errors=[(3, 4, 5), (4, 5)])
    result = ddmin(6, oracle)
    assert result.minimal == (4,) and result.one_minimal


def test_budget_cut_gives_best_so_far():
    oracle = Oracle([{3, 5}])
    result = ddmin(16, oracle, budget=5)
    assert result.status == "budget" and result.why == {"budget": 5, "endpoints_judged": True}
    assert reason_text(result.status, result.why) == "the budget of 5 probes ran out; the smallest failing set so far"
    assert oracle.probes == 5
    assert result.minimal == tuple(range(8)) and not result.one_minimal  # halved once, then cut
    assert result.verdicts[result.minimal] == FAIL


def test_budget_before_endpoints():
    result = ddmin(4, Oracle([{0}]), budget=1)
    assert result.status == "budget" and result.minimal == ()


def test_endpoints_must_pass_and_fail():
    result = ddmin(3, Oracle([set()]))  # everything fails, the passing config too
    assert result.status == "endpoints" and result.minimal == ()
    assert result.why == {"passing": "fail", "failing": "fail"}
    assert "passing config is fail" in reason_text(result.status, result.why)


def test_known_endpoints_are_not_probed():
    oracle = Oracle([{2}])
    result = ddmin(4, oracle, known={(): PASS, (0, 1, 2, 3): FAIL})
    assert result.minimal == (2,)
    assert all(phase != "endpoints" for phase, _ in oracle.batches)


def test_single_change():
    result = ddmin(1, Oracle([{0}]))
    assert result.minimal == (0,) and result.one_minimal and len(result.probes) == 2


def test_combine_repeats():
    assert combine([PASS, PASS]) == PASS
    assert combine([FAIL, FAIL, FAIL]) == FAIL
    assert combine([PASS, FAIL]) == UNRESOLVED
    assert combine([PASS, ERROR]) == ERROR
    assert combine([PASS, FAIL, ERROR]) == UNRESOLVED
    with pytest.raises(ValueError):
        combine([])
    with pytest.raises(ValueError, match="unknown"):
        combine(["maybe"])


def test_bad_oracle_and_inputs():
    with pytest.raises(ValueError, match="differ in 0"):
        ddmin(0, Oracle([{0}]))
    with pytest.raises(ValueError, match="returned 1 verdicts for 2"):
        ddmin(2, lambda subsets, phase: [PASS])


def test_context_probes_and_conditions():
    from sweep.analysis.isolate import conditions, context_probes

    base = {"weights.transfer": "shared", "order": "distributed_first", "optimizer": "sgd"}
    levels = {"weights.transfer": ["shared", "independent"], "order": ["standalone_first", "distributed_first", "separate"],
              "optimizer": ["adam", "sgd"]}
    probes = context_probes(base, levels, skip=["weights.transfer"])
    assert probes == [("order", "standalone_first"), ("order", "separate"), ("optimizer", "adam")]
    verdicts = {("order", "standalone_first"): FAIL, ("order", "separate"): PASS, ("optimizer", "adam"): ERROR}
    assert conditions(base, verdicts) == {
        "order": {"fails": ["distributed_first", "standalone_first"], "passes": ["separate"], "unknown": []}
    }


def test_a_proof_job_failing_on_its_replicas_says_so_never_from_step_none():
    """A new user's skipped average under sharded data: the failing endpoint's losses stay within
    tolerance and it fails because its replicas disagree."""
    from sweep.report.isolate_report import _drift

    row = {"status": "fail", "mean_signed_diff": 5.6e-05, "max_abs_diff": 1.6e-4, "first_fail_step": None,
           "reason": "replicas disagree from step 0"}
    assert _drift(row) == "; its losses within tolerance, it fails on: replicas disagree from step 0"
    assert "from step 3" in _drift(dict(row, first_fail_step=3))
