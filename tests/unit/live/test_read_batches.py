"""How a cluster is read: one labelled LIST per kind and namespace, then the fewest requests that
tell "absent" from "exists but not ours" for what the LIST did not return."""

from __future__ import annotations

import copy
from typing import Any

from fleetplan.addrs import Address
from fleetplan.live import reading
from fleetplan.live.clusters import BUILTIN, Obj, ResourceInfo

FLEET = "demo"
OURS = {reading.FLEET_LABEL: FLEET, reading.MANAGED_BY_LABEL: reading.MANAGED_BY}


def _obj(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {}},
            "data": {"k": name}}


class CountingCluster:
    """Serves ConfigMaps in namespace ns from memory and records every request it is asked."""

    name = "c1"

    def __init__(self, objects: list[Obj], appear_between_lists: Obj | None = None) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.calls: list[tuple[str, str]] = []
        self._appear = appear_between_lists
        self.requests = 0

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None:
        return BUILTIN.get((api_version, kind))

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str, *,
             metadata_only: bool = False) -> list[Obj]:
        self.requests += 1
        self.calls.append(("list-metadata" if metadata_only else "list", label_selector))
        if metadata_only and self._appear is not None:  # created by someone between the two LISTs
            self.objects[self._appear["metadata"]["name"]] = self._appear
        found = [copy.deepcopy(o) for o in self.objects.values()
                 if not label_selector or reading.is_owned(o, FLEET)]
        if metadata_only:
            return [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]}
                    for o in found]
        return found

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        self.requests += 1
        self.calls.append(("get", name))
        found = self.objects.get(name)
        return copy.deepcopy(found) if found else None

    def __getattr__(self, name: str) -> Any:  # writes are not part of reading
        raise AssertionError(f"reading called {name}")


def _wanted(*names: str) -> dict[Address, str]:
    return {Address("c1", "", "ConfigMap", "ns", n): "v1" for n in names}


def _read(cluster: CountingCluster, *names: str) -> reading.Snapshot:
    snapshot, problems = reading.read_snapshot({"c1": cluster}, FLEET, _wanted(*names))
    assert problems == ()
    return snapshot


def test_a_converged_batch_is_one_labelled_list() -> None:
    cluster = CountingCluster([_obj("a", OURS), _obj("b", OURS)])
    snapshot = _read(cluster, "a", "b")
    assert cluster.calls == [("list", reading.selector(FLEET))]
    assert {a.name for a in snapshot.owned} == {"a", "b"} and snapshot.requests == {"c1": 1}


def test_one_missing_name_is_looked_up_with_a_get() -> None:
    cluster = CountingCluster([_obj("a", OURS), _obj("b")])
    snapshot = _read(cluster, "a", "b")
    assert cluster.calls == [("list", reading.selector(FLEET)), ("get", "b")]
    assert {a.name for a in snapshot.unowned} == {"b"}


def test_several_missing_names_cost_one_metadata_list_not_a_get_each() -> None:
    cluster = CountingCluster([_obj("taken"), _obj("unrelated")])
    snapshot = _read(cluster, "new1", "new2", "new3", "taken")
    assert cluster.calls == [("list", reading.selector(FLEET)), ("list-metadata", "")]
    assert set(snapshot.owned) == set()
    assert [a.name for a in snapshot.unowned] == ["taken"]  # reported, never changed
    assert snapshot.unowned[Address("c1", "", "ConfigMap", "ns", "taken")]["metadata"]["uid"] == "uid-taken"
    # the fingerprint tells the two cases apart, and changes when the unowned object goes away
    addresses = _wanted("new1", "new2", "new3", "taken")
    gone = _read(CountingCluster([_obj("unrelated")]), "new1", "new2", "new3", "taken")
    assert snapshot.fingerprint(addresses) != gone.fingerprint(addresses)


def test_an_owned_object_seen_only_in_the_metadata_list_is_read_whole() -> None:
    late = _obj("new2", OURS)
    cluster = CountingCluster([], appear_between_lists=late)
    snapshot = _read(cluster, "new1", "new2")
    assert cluster.calls == [("list", reading.selector(FLEET)), ("list-metadata", ""), ("get", "new2")]
    owned = snapshot.owned[Address("c1", "", "ConfigMap", "ns", "new2")]
    assert owned["data"] == {"k": "new2"} and owned["kind"] == "ConfigMap"


def test_an_owned_object_gone_again_before_its_get_is_absent_not_half_read() -> None:
    class Vanishing(CountingCluster):
        def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
            self.objects.pop(name, None)  # deleted between the metadata LIST and the GET
            return super().get(api_version, kind, namespace, name)

    cluster = Vanishing([], appear_between_lists=_obj("new2", OURS))
    snapshot = _read(cluster, "new1", "new2")
    assert cluster.calls[-1] == ("get", "new2")
    assert not snapshot.owned and not snapshot.unowned


class TwoKinds(CountingCluster):
    """Also serves Namespaces (cluster-scoped): `namespaces` are the ones that exist."""

    def __init__(self, objects: list[Obj], namespaces: list[str]) -> None:
        super().__init__(objects)
        self.namespaces = namespaces

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str, *,
             metadata_only: bool = False) -> list[Obj]:
        if kind != "Namespace":
            return super().list(api_version, kind, namespace, label_selector, metadata_only=metadata_only)
        self.requests += 1
        self.calls.append(("list Namespace", label_selector))
        return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "uid": n, "labels": OURS}}
                for n in self.namespaces]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == "Namespace":
            self.requests += 1
            self.calls.append(("get Namespace", name))
            return None
        return super().get(api_version, kind, namespace, name)


def test_nothing_is_read_in_a_wanted_namespace_that_does_not_exist() -> None:
    wanted = {Address("c1", "", "Namespace", "", "ns"): "v1", **_wanted("a", "b")}
    cluster = TwoKinds([], namespaces=[])
    snapshot, _ = reading.read_snapshot({"c1": cluster}, FLEET, wanted)
    assert cluster.calls == [("list Namespace", reading.selector(FLEET)), ("get Namespace", "ns")]
    assert not snapshot.owned and not snapshot.unowned
    # once the namespace exists, what is in it is read as usual
    present = TwoKinds([_obj("a", OURS)], namespaces=["ns"])
    snapshot, _ = reading.read_snapshot({"c1": present}, FLEET, wanted)
    assert present.calls == [("list Namespace", reading.selector(FLEET)), ("list", reading.selector(FLEET)),
                             ("get", "b")]
    assert {a.name for a in snapshot.owned} == {"ns", "a"}
