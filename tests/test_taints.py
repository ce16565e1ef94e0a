"""Taints and tolerations with Kubernetes' semantics (pure: no database, no network)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from provisioning.scheduling.taints import (
    TOLERATE_PREFER_NO_SCHEDULE,
    Taint,
    Toleration,
    taints_from_list,
    tolerates,
    tolerations_from_list,
    untolerated,
)

GPU = Taint("nvidia.com/gpu", "true", "NoSchedule")
DEDICATED = Taint("dedicated", "batch", "NoSchedule")
SOFT = Taint("spot", "", "PreferNoSchedule")
EVICT = Taint("maintenance", "", "NoExecute")


# --------------------------------------------------------------------------------------
# Reading


def test_taint_from_dict():
    assert Taint.from_dict({"key": "dedicated", "value": "batch", "effect": "NoSchedule"}) == DEDICATED
    assert Taint.from_dict({"key": "spot", "effect": "PreferNoSchedule"}) == SOFT


@pytest.mark.parametrize(
    ("data", "message"),
    [({"effect": "NoSchedule"}, "no key"), ({"key": "a"}, "effect"), ({"key": "a", "effect": "Sometimes"}, "effect")],
)
def test_taint_from_dict_rejects(data, message):
    with pytest.raises(ValueError, match=message):
        Taint.from_dict(data)


def test_taint_parse_and_str():
    assert Taint.parse("dedicated=batch:NoSchedule") == DEDICATED
    assert Taint.parse("spot:PreferNoSchedule") == SOFT
    assert str(DEDICATED) == "dedicated=batch:NoSchedule" and str(SOFT) == "spot:PreferNoSchedule"
    assert DEDICATED.to_dict() == {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
    assert SOFT.to_dict() == {"key": "spot", "effect": "PreferNoSchedule"}
    for bad in ["dedicated=batch", "dedicated:Never", ":NoSchedule", "=x:NoSchedule"]:
        with pytest.raises(ValueError):
            Taint.parse(bad)


def test_toleration_from_dict_defaults():
    t = Toleration.from_dict({"key": "dedicated", "value": "batch"})
    assert (t.key, t.operator, t.value, t.effect, t.toleration_seconds) == ("dedicated", "Equal", "batch", "", None)
    t = Toleration.from_dict({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    assert (t.key, t.operator, t.effect, t.toleration_seconds) == ("", "Exists", "NoExecute", 300)


def test_lists():
    spec = {
        "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}],
    }
    assert taints_from_list(spec["taints"]) == (DEDICATED,)
    assert taints_from_list(None) == () == tolerations_from_list(None)
    assert tolerations_from_list([{"operator": "Exists"}]) == (Toleration(operator="Exists"),)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEDICATED.key = "x"  # type: ignore[misc]
    assert len({DEDICATED, Taint.parse(str(DEDICATED))}) == 1


# --------------------------------------------------------------------------------------
# One toleration against one taint


def test_exists_with_empty_key_tolerates_everything():
    everything = Toleration(operator="Exists")
    for taint in (GPU, DEDICATED, SOFT, EVICT):
        assert everything.tolerates(taint)


def test_exists_with_empty_key_and_an_effect_tolerates_that_effect_only():
    no_execute = Toleration(operator="Exists", effect="NoExecute")
    assert no_execute.tolerates(EVICT)
    assert not no_execute.tolerates(DEDICATED)


def test_exists_with_a_key_ignores_the_value():
    t = Toleration(key="dedicated", operator="Exists")
    assert t.tolerates(DEDICATED) and t.tolerates(Taint("dedicated", "web", "NoExecute"))
    assert not t.tolerates(GPU)


def test_empty_effect_matches_every_effect():
    t = Toleration(key="dedicated", operator="Equal", value="batch")
    for effect in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        assert t.tolerates(Taint("dedicated", "batch", effect))


def test_effect_must_match_when_given():
    t = Toleration(key="dedicated", operator="Equal", value="batch", effect="NoExecute")
    assert not t.tolerates(DEDICATED)
    assert t.tolerates(Taint("dedicated", "batch", "NoExecute"))


def test_equal_compares_values():
    assert Toleration(key="dedicated", value="batch").tolerates(DEDICATED)
    assert not Toleration(key="dedicated", value="web").tolerates(DEDICATED)
    assert not Toleration(key="dedicated", value="").tolerates(DEDICATED)
    assert Toleration(key="spot", value="").tolerates(SOFT)


def test_empty_operator_means_equal():
    assert Toleration(key="dedicated", operator="", value="batch").tolerates(DEDICATED)
    assert not Toleration(key="dedicated", operator="", value="web").tolerates(DEDICATED)


def test_key_must_match():
    assert not Toleration(key="other", operator="Exists").tolerates(DEDICATED)
    assert not Toleration(key="other", value="batch").tolerates(DEDICATED)


def test_unknown_operator_tolerates_nothing():
    assert not Toleration(key="dedicated", operator="Gt", value="1").tolerates(DEDICATED)


# --------------------------------------------------------------------------------------
# Lists: tolerates / untolerated


def test_tolerates_any_of_the_list():
    tolerations = [Toleration(key="other", operator="Exists"), Toleration(key="dedicated", value="batch")]
    assert tolerates(tolerations, DEDICATED)
    assert not tolerates(tolerations, GPU)
    assert not tolerates([], DEDICATED)


def test_untolerated_names_the_first_taint_not_tolerated():
    tolerations = [Toleration(key="dedicated", value="batch")]
    assert untolerated(tolerations, [DEDICATED, GPU, EVICT]) == GPU
    assert untolerated(tolerations, [EVICT, GPU]) == EVICT
    assert untolerated(tolerations, [DEDICATED]) is None


def test_no_taints_no_problem():
    assert untolerated([], []) is None
    assert untolerated([], ()) is None


def test_a_pod_without_tolerations_fails_every_taint_kind():
    for taint in (GPU, SOFT, EVICT):
        assert untolerated([], [taint]) == taint


def test_prefer_no_schedule_counts_unless_relaxed():
    assert untolerated([], [SOFT]) == SOFT
    assert untolerated([], [SOFT], ignore_prefer_no_schedule=True) is None
    assert untolerated([], [SOFT, DEDICATED], ignore_prefer_no_schedule=True) == DEDICATED
    assert untolerated([], [EVICT], ignore_prefer_no_schedule=True) == EVICT


def test_the_relaxation_toleration_equals_ignoring_prefer_no_schedule():
    for taints in ([SOFT], [SOFT, DEDICATED], [DEDICATED, SOFT], [EVICT]):
        assert untolerated([TOLERATE_PREFER_NO_SCHEDULE], taints) == untolerated(
            [], taints, ignore_prefer_no_schedule=True
        )


def test_startup_taints_are_not_passed():
    # Callers pass a NodePool's `taints`, never its `startupTaints` (removed on the node by
    # something else, so pods need not tolerate them).
    spec = {
        "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
    }
    pod = tolerations_from_list([{"key": "dedicated", "operator": "Equal", "value": "batch"}])
    assert untolerated(pod, taints_from_list(spec["taints"])) is None


def test_tolerations_may_be_any_iterable_and_duck_typed():
    taints = [DEDICATED, GPU]
    generator = (
        t for t in [Toleration(key="dedicated", value="batch"), Toleration(key="nvidia.com/gpu", value="true")]
    )
    assert untolerated(generator, taints) is None
    like = [SimpleNamespace(key="dedicated", operator="Exists", value="", effect="", toleration_seconds=None)]
    assert untolerated(like, taints) == GPU
    assert tolerates(like, DEDICATED)


def test_toleration_str():
    assert str(Toleration(operator="Exists")) == "* Exists:*"
    assert str(Toleration(key="dedicated", value="batch", effect="NoSchedule")) == "dedicated=batch:NoSchedule"
