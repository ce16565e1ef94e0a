"""The catalog: instance types, offerings and prices from the bundled snapshot, from the
simulated AWS over HTTP, with the pricing fallback, the ICE cache, the commands that print
and write it, and the validator warning it makes possible."""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import redis as redis_lib
from django.core.management import call_command

from provisioning import crd
from provisioning.cloud import ice
from provisioning.cloud.base import PricingUnavailable, ResolvedNodeClass, Subnet
from provisioning.cloud.catalog import Catalog, snapshot_path, trim_info
from provisioning.cloud.pricing import latest_spot_prices, load_price_table, parse_price_list
from provisioning.scheduling.quantity import format_quantity
from provisioning.services import catalog as service
from provisioning.services.instancetypes import parse_require, select

ROOT = Path(__file__).resolve().parent.parent
PRICE_CSV = ROOT.parent / "shared" / "data" / "ec2-ondemand-prices.csv"
SNAPSHOT = ROOT / "provisioning" / "cloud" / "snapshots" / "us-east-1.json"
AL2023 = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole-my-cluster"}
AL2 = {"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}], "role": "r"}
SNAPSHOT_SOURCE = "simulated AWS (moto's EC2 instance data)"
SEED_FAMILY_WARNING = "no instance family is named m, c or r; did you mean karpenter.k8s.aws/instance-category?"
MAX_WARNING = 120


def quantities(resources) -> dict[str, str]:
    return {name: format_quantity(name, amount) for name, amount in resources.items()}


@pytest.fixture(scope="module")
def snapshot() -> Catalog:
    return Catalog.from_snapshot(SNAPSHOT)


@pytest.fixture(scope="module")
def simulated(snapshot) -> Catalog:
    """The catalog of the simulated mode: the snapshot priced for spot by the simulated market."""
    from provisioning.cloud.simulated import SimulatedPrices

    return snapshot.with_spot(SimulatedPrices(dict(snapshot.on_demand), snapshot.zones).spot_prices(), "simulated")


def by_name(instance_types):
    return {it.name: it for it in instance_types}


def resolved(*zones: str, name: str = "default") -> ResolvedNodeClass:
    ids = {"us-east-1a": "use1-az6", "us-east-1c": "use1-az2"}
    return ResolvedNodeClass(
        name=name,
        ami_family="AL2023",
        subnets=tuple(Subnet(id=f"subnet-{z[-1]}", zone=z, zone_id=ids.get(z, "")) for z in zones),
    )


# ------------------------------------------------------------------ the bundled snapshot


def test_snapshot_is_us_east_1_with_list_prices_of_2026_07_20(snapshot):
    assert snapshot.region == "us-east-1"
    assert snapshot.price_source == "snapshot 2026-07-20"
    assert snapshot.prices_as_of == "2026-07-20"
    assert snapshot.fallback_reason == ""
    assert snapshot.zones == [f"us-east-1{z}" for z in "abcdef"]
    assert snapshot.zone_ids["us-east-1a"].startswith("use1-az")
    assert len(snapshot) > 1000
    assert all(snapshot.type_zones[name] for name in snapshot.names)  # only types offered in the region


def test_m5_large_golden_allocatable_and_list_price(snapshot):
    m5 = by_name(snapshot.instance_types(AL2023, None))["m5.large"]
    assert quantities(m5.allocatable) == {"cpu": "1930m", "memory": "6903Mi", "pods": "29", "ephemeral-storage": "17Gi"}
    assert quantities(m5.capacity)["memory"] == "7577Mi"
    on_demand = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    assert on_demand and all(o.price == 0.096 and o.available for o in on_demand)
    a1 = by_name(snapshot.instance_types(AL2, None))["a1.large"]
    assert quantities(a1.allocatable)["memory"] == "3055Mi"


@pytest.mark.skipif(not PRICE_CSV.exists(), reason="the shared price table is not beside the repository")
def test_every_on_demand_price_is_the_csv_price(snapshot):
    table = load_price_table(PRICE_CSV, "us-east-1")
    assert snapshot.on_demand == {name: price for name, price in table.items() if name in snapshot.infos}
    assert len(snapshot.on_demand) > 0.95 * len(snapshot)


def test_offerings_only_in_the_zones_of_the_subnets(snapshot):
    types = snapshot.instance_types(AL2023, resolved("us-east-1a", "us-east-1c"))
    zones = {o.zone for it in types for o in it.offerings}
    assert zones == {"us-east-1a", "us-east-1c"}
    m5 = by_name(types)["m5.large"]
    assert sorted((o.zone, o.capacity_type) for o in m5.offerings) == [
        ("us-east-1a", "on-demand"),
        ("us-east-1a", "spot"),
        ("us-east-1c", "on-demand"),
        ("us-east-1c", "spot"),
    ]
    assert {o.zone_id for o in m5.offerings} == {snapshot.zone_ids["us-east-1a"], snapshot.zone_ids["us-east-1c"]}
    everywhere = by_name(snapshot.instance_types(AL2023, None))["m5.large"]
    assert {o.zone for o in everywhere.offerings} == snapshot.type_zones["m5.large"]


def test_offerings_follow_the_type_zones_too(snapshot):
    """A zone the type is not offered in gets no offering even with a subnet there."""
    name = next(n for n in snapshot.names if snapshot.type_zones[n] != set(snapshot.zones) and n.startswith("m"))
    missing = sorted(set(snapshot.zones) - snapshot.type_zones[name])[0]
    it = by_name(snapshot.instance_types(AL2023, resolved(missing)))[name]
    assert it.offerings == ()


def test_a1_is_left_out_for_al2023_and_bottlerocket_but_not_al2(snapshot):
    a1 = {n for n in snapshot.names if n.startswith("a1.")}
    assert a1
    assert not a1 & set(by_name(snapshot.instance_types(AL2023, None)))
    assert not a1 & set(by_name(snapshot.instance_types(None, None)))  # AL2023 is the default
    bottlerocket = {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "role": "r"}
    assert not a1 & set(by_name(snapshot.instance_types(bottlerocket, None)))
    assert a1 <= set(by_name(snapshot.instance_types(AL2, None)))


def test_windows_runs_only_amd64(snapshot):
    windows = {"amiSelectorTerms": [{"alias": "windows2022@latest"}], "role": "r"}
    types = snapshot.instance_types(windows, None)
    assert types and {it.labels["kubernetes.io/arch"] for it in types} == {"amd64"}


def test_types_no_ami_runs_on_are_left_out(snapshot):
    from provisioning.cloud.base import Image

    only_amd64 = replace(resolved("us-east-1a"), images=(Image(id="ami-1", name="al2023", arch="amd64"),))
    arches = {it.labels["kubernetes.io/arch"] for it in snapshot.instance_types(AL2023, only_amd64)}
    assert arches == {"amd64"}


def test_kubelet_overrides_reach_the_types(snapshot):
    spec = {**AL2023, "kubelet": {"maxPods": 110, "systemReserved": {"cpu": "100m"}}}
    m5 = by_name(snapshot.instance_types(spec, None))["m5.large"]
    assert quantities(m5.allocatable)["pods"] == "110"
    assert quantities(m5.allocatable)["cpu"] == "1830m"


def test_an_offering_without_a_price_is_kept_but_not_available(snapshot):
    unpriced = snapshot.instance_types(AL2023, None)
    m5 = by_name(unpriced)["m5.large"]
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]  # the bare snapshot has no spot prices
    assert spot and all(not o.available and o.price is None and "no spot price" in o.unavailable_reason for o in spot)
    assert m5.cheapest_price(frozenset({"spot"})) is None
    no_price = [it for it in unpriced if it.name not in snapshot.on_demand and it.offerings]
    assert no_price and all(not o.available for it in no_price for o in it.offerings)


def test_spot_is_cheaper_than_on_demand_in_the_simulated_market(simulated):
    types = simulated.instance_types(AL2023, None)
    checked = 0
    for it in types:
        on_demand = simulated.on_demand.get(it.name)
        for o in it.offerings:
            if o.capacity_type == "spot" and on_demand:
                assert o.available and 0 < o.price < on_demand, (it.name, o)
                checked += 1
    assert checked > 1000
    m5 = by_name(types)["m5.large"]
    assert m5.cheapest_price(frozenset({"spot"})) < m5.cheapest_price(frozenset({"on-demand"}))
    assert len({o.price for o in m5.offerings if o.capacity_type == "spot"}) > 1  # prices vary by zone


def test_built_types_are_cached_per_nodeclass_and_zones(snapshot):
    first = snapshot.instance_types(AL2023, resolved("us-east-1a"))
    again = snapshot.instance_types(dict(AL2023), resolved("us-east-1a", name="other"))
    assert first[0] is again[0]  # same spec and subnets: the same objects
    other = snapshot.instance_types(AL2023, resolved("us-east-1c"))
    assert other[0] is not first[0]


# ------------------------------------------------------------------ the ICE cache


@pytest.fixture
def redis(redis_url):
    client = redis_lib.Redis.from_url(redis_url)
    yield client
    client.close()


def test_an_ice_marked_offering_is_unavailable(simulated, redis):
    prefix = f"karpweb:test:{uuid.uuid4().hex}:ice:"
    try:
        ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "InsufficientInstanceCapacity", prefix=prefix)
        types = simulated.instance_types(
            AL2023, resolved("us-east-1a", "us-east-1c"), ice.checker(redis, prefix=prefix)
        )
        offerings = {(o.zone, o.capacity_type): o for o in by_name(types)["m5.large"].offerings}
        marked = offerings[("us-east-1a", "spot")]
        assert (
            not marked.available and marked.price is not None and "insufficient capacity" in marked.unavailable_reason
        )
        assert offerings[("us-east-1c", "spot")].available and offerings[("us-east-1a", "on-demand")].available
        assert all(o.available for o in by_name(types)["m5.xlarge"].offerings)
        # The cached shapes are untouched: without the mark, it is available again.
        clean = by_name(simulated.instance_types(AL2023, resolved("us-east-1a", "us-east-1c")))["m5.large"]
        assert all(o.available for o in clean.offerings)
    finally:
        for key in redis.scan_iter(match=prefix + "*"):
            redis.delete(key)


# ------------------------------------------------------------------ live builds and the pricing fallback


class SnapshotCloud:
    """A CloudProvider answering the catalog calls from a catalog's data."""

    def __init__(self, catalog: Catalog) -> None:
        self.region = catalog.region
        self._catalog = catalog

    def instance_type_infos(self):
        return [dict(info) for info in self._catalog.infos.values()]

    def instance_type_zones(self):
        return {name: set(zones) for name, zones in self._catalog.type_zones.items()}

    def zone_ids(self):
        return dict(self._catalog.zone_ids)


class DownPrices:
    def on_demand_prices(self):
        raise PricingUnavailable("Could not connect to the endpoint URL: https://api.pricing.us-east-1.amazonaws.com/")

    def spot_prices(self):
        raise PricingUnavailable("DescribeSpotPriceHistory: timed out")


class LivePrices:
    def __init__(self, on_demand, spot):
        self._on_demand, self._spot = on_demand, spot

    def on_demand_prices(self):
        return dict(self._on_demand)

    def spot_prices(self):
        return dict(self._spot)


def test_pricing_unreachable_falls_back_to_the_snapshot_and_says_so(snapshot):
    built = Catalog.build(SnapshotCloud(snapshot), DownPrices(), snapshot)
    assert built.on_demand == snapshot.on_demand
    assert built.price_source == "snapshot 2026-07-20"
    assert built.fallback_reason.startswith("Pricing API unreachable: Could not connect")
    assert "using the bundled list prices of 2026-07-20" in built.fallback_reason
    assert "spot price history unreachable" in built.fallback_reason
    # Spot is priced at on-demand until the history answers (upstream's start-up rule).
    m5 = by_name(built.instance_types(AL2023, None))["m5.large"]
    assert {o.price for o in m5.offerings} == {0.096} and all(o.available for o in m5.offerings)
    assert built.built_at and "unreachable" in built.describe_prices()


def test_without_any_fallback_nothing_is_priced(snapshot):
    built = Catalog.build(SnapshotCloud(snapshot), DownPrices(), None)
    assert built.on_demand == {} and "no prices" in built.fallback_reason
    assert not any(it.available_offerings() for it in built.instance_types(AL2023, None))


def test_live_prices_are_laid_over_the_snapshot(snapshot):
    prices = LivePrices({"m5.large": 0.1}, {("m5.large", "us-east-1a"): 0.031})
    built = Catalog.build(SnapshotCloud(snapshot), prices, snapshot)
    assert built.price_source == "pricing-api" and built.fallback_reason == ""
    assert built.on_demand["m5.large"] == 0.1
    assert built.on_demand["c5.large"] == snapshot.on_demand["c5.large"]  # merged, as upstream
    m5 = {(o.zone, o.capacity_type): o for o in by_name(built.instance_types(AL2023, None))["m5.large"].offerings}
    assert m5[("us-east-1a", "spot")].price == 0.031 and m5[("us-east-1a", "spot")].available
    assert m5[("us-east-1b", "spot")].price is None and not m5[("us-east-1b", "spot")].available


def test_snapshot_round_trip(simulated):
    again = Catalog.from_json(simulated.to_json())
    assert again.to_snapshot() == simulated.to_snapshot()
    assert again.spot == simulated.spot and again.spot_source == "simulated"
    assert (
        by_name(again.instance_types(AL2023, None))["m5.large"]
        == by_name(simulated.instance_types(AL2023, None))["m5.large"]
    )


def test_settings_reach_the_builder(snapshot):
    tighter = snapshot.with_settings(vm_memory_overhead_percent=0.1, reserved_enis=1)
    m5 = by_name(tighter.instance_types(AL2023, None))["m5.large"]
    assert quantities(m5.capacity)["pods"] == "20"  # (3 − 1) ENIs × 9 + 2
    assert m5.capacity["memory"] < by_name(snapshot.instance_types(AL2023, None))["m5.large"].capacity["memory"]


# ------------------------------------------------------------------ the simulated AWS over HTTP


@pytest.fixture
def aws_env(simulated_aws, monkeypatch):
    for name, value in simulated_aws.env().items():
        monkeypatch.setenv(name, value)
    return simulated_aws


def test_a_build_from_the_moto_endpoint_matches_the_snapshot(aws_env, snapshot):
    from provisioning.cloud.aws import AWSCloud, AWSConfig
    from provisioning.cloud.simulated import SimulatedPrices

    cloud = AWSCloud(AWSConfig(region=aws_env.region))
    built = Catalog.build(cloud, SimulatedPrices(dict(snapshot.on_demand), snapshot.zones), snapshot)
    assert len(built) == len(snapshot)
    assert built.names == snapshot.names
    assert built.type_zones == snapshot.type_zones and built.zone_ids == snapshot.zone_ids
    assert built.infos == snapshot.infos
    assert by_name(built.instance_types(AL2023, None))["m5.large"].allocatable == (
        by_name(snapshot.instance_types(AL2023, None))["m5.large"].allocatable
    )


def test_snapshot_catalog_writes_a_deterministic_file(aws_env, tmp_path):
    prices = PRICE_CSV
    if not prices.exists():
        prices = tmp_path / "prices.csv"
        prices.write_text("region,instance_type,usd_per_hour\nus-east-1,m5.large,0.096000\n")
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    for out in (first, second):
        call_command(
            "snapshot_catalog",
            "--region=us-east-1",
            f"--prices={prices}",
            f"--out={out}",
            f"--source={SNAPSHOT_SOURCE}",
            stdout=io.StringIO(),
        )
    assert first.read_bytes() == second.read_bytes()
    data = json.loads(first.read_text())
    assert data["prices"]["asOf"] == "2026-07-20" and data["prices"]["source"] == "snapshot 2026-07-20"
    assert list(data["instanceTypes"]) == sorted(data["instanceTypes"])
    assert "/work/" not in first.read_text() and str(prices.parent) not in first.read_text()
    info = data["instanceTypes"]["m5.large"]["info"]
    assert info == trim_info(info) and "NitroTpmInfo" not in info  # only the fields the catalog reads
    if prices == PRICE_CSV:
        assert first.read_bytes() == SNAPSHOT.read_bytes(), "the committed snapshot is out of date"


def test_refresh_catalog_shares_the_build_through_redis(aws_env, redis, snapshot, monkeypatch):
    from provisioning.cloud.aws import AWSCloud, AWSConfig

    region = "us-east-1"
    monkeypatch.setattr(service, "REDIS_PREFIX", f"karpweb:test:{uuid.uuid4().hex}:catalog:")
    service.forget()
    try:
        cold = service.load_catalog(region, redis=redis, fresh=True)
        assert cold.built_at == "" and cold.spot_source == service.SIMULATED_SPOT  # the bundled snapshot
        built = service.refresh_catalog(region, cloud=AWSCloud(AWSConfig(region=region)), redis=redis)
        assert len(built) == len(snapshot) and built.built_at
        assert built.price_source == "snapshot 2026-07-20" and built.spot_source == service.SIMULATED_SPOT
        assert redis.get(service.redis_key(region) + ":version")
        service.forget()  # another process: it finds the stored build
        shared = service.load_catalog(region, redis=redis, fresh=True)
        assert shared.built_at == built.built_at and shared.to_snapshot() == built.to_snapshot()
    finally:
        for key in redis.scan_iter(match=service.REDIS_PREFIX + "*"):
            redis.delete(key)
        service.forget()


def test_cold_start_is_the_bundled_snapshot(monkeypatch):
    monkeypatch.setattr(service, "REDIS_PREFIX", f"karpweb:test:{uuid.uuid4().hex}:catalog:")  # nothing stored
    service.forget()
    catalog = service.load_catalog("us-east-1", fresh=True)
    assert catalog.region == "us-east-1" and catalog.price_source == "snapshot 2026-07-20" and not catalog.built_at
    assert catalog.spot_source == service.SIMULATED_SPOT  # the simulated mode prices spot
    assert service.load_catalog("us-east-1") is catalog  # kept by the process
    assert service.bundled_catalog("eu-west-1").fallback_reason.startswith("no bundled catalog for eu-west-1")


# ------------------------------------------------------------------ manage.py catalog


def run_catalog(*args: str) -> str:
    out = io.StringIO()
    call_command("catalog", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_catalog_command_json_shape():
    rows = json.loads(run_catalog("--format=json", "--require", "karpenter.k8s.aws/instance-family=m5"))
    assert rows and {r["name"] for r in rows} == {n for n in service.load_catalog().names if n.startswith("m5.")}
    for row in rows:
        assert set(row) == {"name", "labels", "capacity", "allocatable", "offerings"}
        assert row["labels"]["karpenter.k8s.aws/instance-family"] == "m5"
        for offering in row["offerings"]:
            assert set(offering) == {"zone", "capacityType", "price", "available"}
    m5 = next(r for r in rows if r["name"] == "m5.large")
    assert {k: m5["allocatable"][k] for k in ("cpu", "memory", "pods")} == {
        "cpu": "1930m",
        "memory": "6903Mi",
        "pods": "29",
    }
    assert m5["capacity"]["cpu"] == "2"
    assert {o["capacityType"] for o in m5["offerings"]} == {"on-demand", "spot"}
    assert all(o["price"] == 0.096 for o in m5["offerings"] if o["capacityType"] == "on-demand")


def test_catalog_command_filters_and_table():
    rows = json.loads(
        run_catalog(
            "--format=json",
            "--require=karpenter.k8s.aws/instance-category=c,m",
            "--require=karpenter.k8s.aws/instance-cpu>31",
            "--require=karpenter.k8s.aws/instance-cpu<65",
            "--require=kubernetes.io/arch!=arm64",
            "--require=karpenter.sh/capacity-type=spot",
            "--require=topology.kubernetes.io/zone=us-east-1b",
        )
    )
    assert rows
    for row in rows:
        assert row["labels"]["karpenter.k8s.aws/instance-category"] in ("c", "m")
        assert 31 < int(row["labels"]["karpenter.k8s.aws/instance-cpu"]) < 65
        assert row["labels"]["kubernetes.io/arch"] == "amd64"
        assert {(o["zone"], o["capacityType"]) for o in row["offerings"]} == {("us-east-1b", "spot")}
    lines = run_catalog("--require=node.kubernetes.io/instance-type=m5.large").splitlines()
    assert lines[0].startswith("# us-east-1: 1 instance types; prices: snapshot 2026-07-20")
    assert lines[1].split() == ["NAME", "CPU", "MEMORY", "PODS", "ON-DEMAND", "SPOT", "ZONES"]
    assert lines[2].split()[:5] == ["m5.large", "1930m", "6903Mi", "29", "$0.0960"]


@pytest.mark.parametrize("text", ["nokey", "a>b", "=x", "k=", "k<1,2"])
def test_require_parser_refuses_junk(text):
    with pytest.raises(ValueError):
        parse_require(text)


def test_require_parser_normalizes_keys(snapshot):
    require = parse_require("beta.kubernetes.io/arch=arm64")
    assert require.key == "kubernetes.io/arch"
    assert {it.labels["kubernetes.io/arch"] for it in select(snapshot.instance_types(AL2, None), [require])} == {
        "arm64"
    }


@pytest.mark.django_db
def test_catalog_command_for_a_nodeclass_uses_its_subnets_from_status(seed_ec2nodeclass, monkeypatch):
    from provisioning.models import EC2NodeClass
    from provisioning.services import policy

    policy.apply_manifest(seed_ec2nodeclass, source="test")
    EC2NodeClass.objects.filter(name="default").update(
        status={"subnets": [{"id": "subnet-1", "zone": "us-east-1b", "zoneID": "use1-az1"}]}
    )

    def unreachable():
        raise ConnectionError("no cloud in this test")

    monkeypatch.setattr("provisioning.services.cloud.get_cloud", unreachable)
    rows = json.loads(
        run_catalog("--format=json", "--nodeclass=default", "--require=karpenter.k8s.aws/instance-size=large")
    )
    assert rows and {o["zone"] for r in rows for o in r["offerings"]} == {"us-east-1b"}
    assert not any(r["name"].startswith("a1.") for r in rows)


# ------------------------------------------------------------------ price parsing


def test_parse_price_list_reads_get_products_items():
    item = {
        "product": {"attributes": {"instanceType": "m5.large"}},
        "terms": {
            "OnDemand": {
                "X.JRTCKXETXF": {
                    "priceDimensions": {
                        "X.JRTCKXETXF.6YS6EN2CT7": {"pricePerUnit": {"USD": "0.0960000000"}},
                        "X.JRTCKXETXF.ZERO": {"pricePerUnit": {"USD": "0.0000000000"}},
                    }
                }
            }
        },
    }
    cny = {
        "product": {"attributes": {"instanceType": "c5.large"}},
        "terms": {"OnDemand": {"t": {"priceDimensions": {"d": {"pricePerUnit": {"CNY": "0.7"}}}}}},
    }
    assert parse_price_list([json.dumps(item), cny, "not json", {"product": {}}]) == {"m5.large": 0.096}
    assert parse_price_list([cny], currency="CNY") == {"c5.large": 0.7}


def test_latest_spot_price_per_type_and_zone():
    def record(zone, price, stamp=None):
        out = {"InstanceType": "m5.large", "AvailabilityZone": zone, "SpotPrice": price}
        return {**out, "Timestamp": stamp} if stamp else out

    records = [
        record("us-east-1a", "0.030", "2026-07-20T10:00:00Z"),
        record("us-east-1a", "0.035", "2026-07-20T12:00:00Z"),
        record("us-east-1a", "0.020", "2026-07-20T11:00:00Z"),
        record("us-east-1b", "bad", "2026-07-20T12:00:00Z"),
        record("us-east-1c", "0.04"),
    ]
    assert latest_spot_prices(records) == {("m5.large", "us-east-1a"): 0.035}


def test_load_price_table_picks_the_region(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text(
        "region,instance_type,usd_per_hour\nus-east-1,m5.large,0.096000\nus-gov-west-1,m5.large,0.121000\n"
        "us-east-1,x1.bad,\n"
    )
    assert load_price_table(path, "us-east-1") == {"m5.large": 0.096}
    assert load_price_table(path, "us-gov-west-1") == {"m5.large": 0.121}
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError):
        load_price_table(tmp_path / "other.csv", "us-east-1")


def test_snapshot_path_falls_back_to_us_east_1():
    assert snapshot_path("us-east-1") == SNAPSHOT
    assert snapshot_path("eu-west-3") == SNAPSHOT


# ------------------------------------------------------------------ the validator warning


def catalog_warnings(doc, labels):
    return [w for w in crd.validate(doc, catalog_labels=labels).warnings if "WhenUnderutilized" not in w]


def nodepool_with(*requirements):
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": key, "operator": operator, "values": values} for key, operator, values in requirements
                    ],
                }
            }
        },
    }


def test_the_seed_nodepool_gets_the_catalog_warning(seed_nodepool, snapshot):
    result = crd.validate(seed_nodepool, catalog_labels=snapshot.label_values())
    assert result.ok
    assert SEED_FAMILY_WARNING in result.warnings
    assert not any("has no generation" in w for w in result.warnings)  # the heuristic gave way
    assert all(len(w) < MAX_WARNING for w in result.warnings)
    # Without a catalog the heuristic stays.
    assert any("has no generation" in w for w in crd.validate(seed_nodepool).warnings)


@pytest.mark.parametrize(
    ("requirement", "warning"),
    [
        (
            ("node.kubernetes.io/instance-type", "In", ["m5", "c5"]),
            "no instance type is named m5 or c5; did you mean karpenter.k8s.aws/instance-family?",
        ),
        (
            ("karpenter.k8s.aws/instance-family", "In", ["m5.large"]),
            "no instance family is named m5.large; did you mean node.kubernetes.io/instance-type?",
        ),
        (("kubernetes.io/arch", "In", ["x86_64"]), "no architecture is named x86_64; did you mean amd64?"),
        (("karpenter.k8s.aws/instance-family", "In", ["m5x"]), "no instance family is named m5x; did you mean m5?"),
        (
            ("karpenter.k8s.aws/instance-family", "NotIn", ["m", "c"]),
            "no instance family is named m or c, so NotIn excludes nothing; "
            "did you mean karpenter.k8s.aws/instance-category?",
        ),
        (
            ("topology.kubernetes.io/zone", "In", ["use1-az1"]),
            "no zone is named use1-az1; did you mean topology.k8s.aws/zone-id?",
        ),
    ],
    ids=["type-as-family", "family-as-type", "arch-alias", "family-typo", "notin-categories", "zone-id"],
)
def test_catalog_warnings_suggest_a_fix(requirement, warning, snapshot):
    assert catalog_warnings(nodepool_with(requirement), snapshot.label_values()) == [warning]


@pytest.mark.parametrize(
    "requirement",
    [
        ("karpenter.k8s.aws/instance-family", "In", ["m5", "nosuch"]),  # one value matches: fine
        ("karpenter.k8s.aws/instance-category", "In", ["m", "c", "r"]),
        ("kubernetes.io/os", "In", ["windows"]),  # depends on the EC2NodeClass, not checked
        ("example.com/team", "In", ["a"]),  # not a catalog label
        ("karpenter.k8s.aws/instance-cpu", "Gt", ["4"]),
        ("karpenter.k8s.aws/instance-family", "Exists", []),
    ],
)
def test_no_warning_when_something_matches_or_the_label_is_not_the_catalogs(requirement, snapshot):
    assert catalog_warnings(nodepool_with(requirement), snapshot.label_values()) == []


@pytest.mark.parametrize(
    "values",
    [["y" * 63], ["a" * 63, "b" * 63, "c" * 63, "d" * 63, "e" * 63], ["m", "c", "r", "x", "z"]],
    ids=["long", "many-long", "many"],
)
@pytest.mark.parametrize(
    "key", ["karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/instance-encryption-in-transit-supported"]
)
def test_catalog_warnings_stay_under_120_characters(key, values, snapshot):
    warnings = catalog_warnings(nodepool_with((key, "In", values)), snapshot.label_values())
    assert len(warnings) == 1 and len(warnings[0]) < MAX_WARNING, warnings


def test_unmatched_numeric_label_names_the_key(snapshot):
    (warning,) = catalog_warnings(
        nodepool_with(("karpenter.k8s.aws/instance-cpu", "In", ["3"])), snapshot.label_values()
    )
    assert warning.startswith("no instance type has instance-cpu 3")


@pytest.mark.django_db
def test_validate_manifest_passes_the_catalog(seed_nodepool):
    from provisioning.services.policy import validate_manifest

    warnings = validate_manifest(seed_nodepool).warnings
    assert SEED_FAMILY_WARNING in warnings
    assert not any("has no generation" in w for w in warnings)


# ------------------------------------------------------------------ the periodic refresh


def test_refresh_task_is_scheduled_every_12_hours_and_returns_json(snapshot, monkeypatch, settings):
    from provisioning.tasks import refresh_catalog

    entry = settings.CELERY_BEAT_SCHEDULE["refresh-catalog"]
    assert entry["task"] == refresh_catalog.name and entry["schedule"] == 12 * 3600
    asked = []
    monkeypatch.setattr(service, "refresh_catalog", lambda region=None: asked.append(region) or snapshot)
    result = refresh_catalog("us-east-1")
    assert asked == ["us-east-1"]
    assert json.loads(json.dumps(result)) == result
    assert result["instanceTypes"] == len(snapshot) and result["prices"] == "snapshot 2026-07-20"
