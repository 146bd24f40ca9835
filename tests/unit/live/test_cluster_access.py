"""`ClusterAccess` with a kubeconfig from a Secret: the reference round-trips through the state's
dict form, the kubeconfig itself never does, and connecting without it names the Secret."""

from __future__ import annotations

import json

import pytest

from fleetplan.errors import ClusterError
from fleetplan.live.kubeconfigs import ClusterAccess, SecretRef, access_from_kubeconfig, new_api_client

KUBECONFIG = b"""
apiVersion: v1
kind: Config
current-context: c2
clusters: [{name: c2, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: c2, context: {cluster: c2, user: u}}]
"""


def test_the_secret_reference_round_trips_and_the_kubeconfig_stays_in_memory() -> None:
    bare = ClusterAccess("c2", None, "c2", None, SecretRef("fleets", "c2-kubeconfig", "config"))
    loaded = access_from_kubeconfig(bare, KUBECONFIG)
    assert loaded.kubeconfig_data is not None
    written = loaded.as_dict()
    assert written["kubeconfigSecret"] == {"namespace": "fleets", "name": "c2-kubeconfig", "key": "config"}
    assert written["kubeconfig"] is None
    assert "not-a-real-token" not in json.dumps(written) + repr(loaded)
    back = ClusterAccess.from_dict(json.loads(json.dumps(written)))
    assert back == loaded and back.kubeconfig_data is None
    assert ClusterAccess.from_dict(ClusterAccess("c1", "/k", "c1").as_dict()) == ClusterAccess("c1", "/k", "c1")


def test_an_in_memory_kubeconfig_makes_a_client_without_a_file() -> None:
    access = access_from_kubeconfig(ClusterAccess("c2", kubeconfig_secret=SecretRef("ns", "s")), KUBECONFIG)
    client = new_api_client(access)
    assert client.configuration.host == "https://127.0.0.1:1"
    assert client.configuration.api_key["BearerToken"] == "Bearer not-a-real-token"


def test_a_secret_reference_without_its_kubeconfig_names_the_secret() -> None:
    with pytest.raises(ClusterError, match=r"cluster c2: its kubeconfig Secret ns/s \(key kubeconfig\)"):
        new_api_client(ClusterAccess("c2", kubeconfig_secret=SecretRef("ns", "s")))


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"just a string", b"[1, 2]", b"clusters: {a: 1}", b"key: [unclosed"])
def test_a_secret_that_is_not_a_kubeconfig_is_a_cluster_error(raw: bytes) -> None:
    expected = r"cluster c2: kubeconfig Secret ns/s \(key kubeconfig\) is not a kubeconfig"
    with pytest.raises(ClusterError, match=expected):
        access_from_kubeconfig(ClusterAccess("c2", kubeconfig_secret=SecretRef("ns", "s")), raw)
