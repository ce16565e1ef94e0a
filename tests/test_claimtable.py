"""The claim table: which planned claims can take a pod, asked of every claim at once."""

from __future__ import annotations

import numpy as np

from provisioning.scheduling.claimtable import ClaimTable

# cpu (m), memory (MiB), pods
SMALLEST = np.array([100, 128, 1])


def table_of(*claims):
    """Claims as (room on the largest type, room on the cheapest or None, zone or None)."""
    table = ClaimTable(3, SMALLEST)
    for index, (largest, cheapest, zone) in enumerate(claims):
        table.set(index, np.array(largest), None if cheapest is None else np.array(cheapest), zone)
    return table


def test_rooms_on_the_largest_and_the_cheapest_type():
    table = table_of(
        ([4000, 8192, 100], [500, 1024, 10], "a"),
        ([1000, 1024, 100], [1000, 1024, 100], None),
        ([0, 0, 0], None, None),  # no type left
    )
    pod = np.array([750, 512, 1])
    assert table.largest_holds(pod, 0, 3).tolist() == [True, True, False]
    assert table.cheapest_holds(pod, 0, 3).tolist() == [False, True, False]
    assert table.takes_now(pod, 3).tolist() == [False, True, False]
    assert table.largest_holds(pod, 1, 3).tolist() == [True, False]


def test_takes_now_needs_room_for_the_smallest_pod_in_every_resource():
    # room for this pod's cpu and memory, but less memory than the smallest pod asks
    table = table_of(([4000, 8192, 100], [500, 100, 10], None))
    assert table.takes_now(np.array([100, 64, 1]), 1).tolist() == [False]


def test_claims_pinned_to_other_zones():
    table = table_of(
        ([1, 1, 1], [1, 1, 1], "a"),
        ([1, 1, 1], [1, 1, 1], "b"),
        ([1, 1, 1], [1, 1, 1], None),
    )
    assert table.outside(frozenset({"a"}), 3).tolist() == [False, True, False]
    assert table.outside(frozenset(), 3).tolist() == [True, True, False]
    table.set(1, np.array([1, 1, 1]), np.array([1, 1, 1]), "a")  # a claim is re-pinned
    assert table.outside(frozenset({"a"}), 3).tolist() == [False, False, False]


def test_the_table_grows_past_its_first_rows():
    table = ClaimTable(3, SMALLEST)
    for index in range(200):
        table.set(index, np.array([index, 1024, 10]), np.array([index, 1024, 10]), f"z{index % 3}")
    pod = np.array([150, 128, 1])
    assert np.flatnonzero(table.takes_now(pod, 200)).tolist() == list(range(150, 200))
    assert table.outside(frozenset({"z0"}), 200).sum() == 133
