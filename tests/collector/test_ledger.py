"""GPU-seconds per pod across passes: driven through random sequences of passes (shares held,
clock steps, gaps), the counters never decrease, bill exactly the previous pass's shares over
the bounded step, and a pod's series ends one pass after it holds nothing."""

from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.shares import Tenant
from gpu_enricher.collector.ledger import Ledger, accumulate

MAX_STEP = 2.0
PODS: list[Tenant] = [("ml", p, "main", "nvidia.com/gpu") for p in "abcde"]

passes = st.lists(st.tuples(
    st.dictionaries(st.sampled_from(PODS), st.sampled_from([0.25, 3 / 7, 0.5, 1.0, 2.0])),
    st.floats(min_value=0.0, max_value=30.0)), min_size=1, max_size=25)


def test_a_pod_is_billed_its_share_over_the_steps_and_shown_once_after_it_leaves() -> None:
    a, b = PODS[:2]
    ledger = accumulate(Ledger(), {a: 1.0}, 100.0, MAX_STEP)
    assert ledger.totals == {a: 0.0}, "first seen: 0"
    ledger = accumulate(ledger, {a: 1.0, b: 0.25}, 101.5, MAX_STEP)
    assert ledger.totals == {a: 1.5, b: 0.0}
    ledger = accumulate(ledger, {a: 1.0}, 102.5, MAX_STEP)
    assert ledger.totals == {a: 2.5, b: 0.25}, "b gone: billed to this pass, shown once more"
    ledger = accumulate(ledger, {a: 1.0}, 160.0, MAX_STEP)
    assert ledger.totals == {a: 4.5}, "a gap of 57.5 s is billed as two intervals; b ends"


@given(passes)
def test_counters_never_decrease_and_bill_the_shares_in_force(
        steps: list[tuple[dict[Tenant, float], float]]) -> None:
    ledger, now = Ledger(), 1000.0
    for shares, advance in steps:
        before, held, was_at = ledger.totals, ledger.shares, ledger.at
        now += advance
        ledger = accumulate(ledger, shares, now, MAX_STEP)
        step = 0.0 if was_at is None else min(advance, MAX_STEP)
        for tenant, total in ledger.totals.items():
            assert total >= before.get(tenant, 0.0), "never decreases"
            assert abs(total - before.get(tenant, 0.0) - held.get(tenant, 0.0) * step) < 1e-9
        # Shown: what holds now, and what held until this pass; nothing else.
        assert set(ledger.totals) == set(shares) | set(held)
        # A tenant absent from the last pass and this one starts again from 0.
        for tenant in set(shares) - set(held) - set(before):
            assert ledger.totals[tenant] == 0.0
