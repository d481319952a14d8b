"""Scenario 9, mutation check: scenario checks run again with renewal
disabled and with the loss signal never sent, and must fail: the suite
proves it can see the bugs it is about."""

from __future__ import annotations

import pytest

import mutations
from test_s1_pause import check_pause
from test_s2_renewal_terminated import check_terminated
from test_s7_leaving import check_progress_async, check_progress_sync


@pytest.fixture
def mutated():
    try:
        yield mutations.apply
    finally:
        mutations.undo()


def test_s9_no_renewal_fails_scenario_2(cluster, mutated):
    mutated("no-renewal")
    with pytest.raises(AssertionError, match="the first renewal"):
        check_terminated(cluster, "s9-no-renewal")


def test_s9_no_signal_fails_scenario_7(cluster, children, mutated):
    mutated("no-signal")
    with pytest.raises(AssertionError, match="not lost at its progress deadline"):
        check_progress_sync(cluster, children, "s9-no-signal-sync")


def test_s9_no_signal_fails_scenario_7_async(cluster, children, mutated):
    mutated("no-signal")
    with pytest.raises(AssertionError, match="not cancelled"):
        check_progress_async(cluster, children, "s9-no-signal-async")


def test_s9_no_signal_fails_scenario_1(cluster, children):
    # The mutation is applied in the child, which holds the lease.
    with pytest.raises(AssertionError, match="was not told first"):
        check_pause(cluster, children, "s9-no-signal-pause", mutation="no-signal")
