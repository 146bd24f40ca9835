"""Bundles: sources (mirror, cache, release download), sha256 pins, parsing, and rendering.

Reads the genuine upstream Antrea v2.7.0 files from FLEETPLAN_MIRROR (default ../shared/upstream).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fleetplan.addrs import Address
from fleetplan.stacks.bundles import (
    ENV_MIRROR,
    BundleError,
    BundleLayout,
    BundleSource,
    RenderOptions,
    address_of,
    parse_manifests,
    pinned_image,
    render_objects,
    split_image,
)

MIRROR = Path(os.environ.get(ENV_MIRROR) or Path(__file__).resolve().parents[4] / "shared" / "upstream")
RELEASE = "https://github.com/antrea-io/antrea/releases/download"
LEADER_SHA = "ef973a725c473ad3b78ec6b2ff66451afe55165f116546a03bd166f613358758"
MEMBER_SHA = "cc10af94e6a5b2f7bc8405648f14f62481f73a08e0232f800566deac42b49566"
LAYOUT = BundleLayout(
    stack="antrea",
    files={"leader": ("antrea-multicluster-leader.yml",), "member": ("antrea-multicluster-member.yml",),
           "split": ("antrea-multicluster-leader-global.yml", "antrea-multicluster-leader-namespaced.yml")},
    upstream_namespace={"leader": "antrea-multicluster", "member": "kube-system"},
    release_url=RELEASE + "/{version}/{file}",
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_MIRROR, raising=False)
    monkeypatch.setenv("FLEETPLAN_CACHE_DIR", str(tmp_path / "cache"))


_PARSED: dict[str, Path] = {}


def mirror_source(tmp_path: Path, **pins: str) -> BundleSource:
    return BundleSource(mirror=MIRROR, cache_dir=tmp_path / "cache", pins=pins)


def warm_source(tmp_path_factory: pytest.TempPathFactory) -> BundleSource:
    """A mirror source whose parse cache is shared by the tests that do not test caching."""
    if "dir" not in _PARSED:
        _PARSED["dir"] = tmp_path_factory.mktemp("warm-cache")
    return BundleSource(mirror=MIRROR, cache_dir=_PARSED["dir"])


def image_of(deployment: dict[str, Any]) -> str:
    image: str = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def refusing_fetch(url: str) -> bytes:
    raise OSError("network is unreachable")


class TestSources:
    def test_mirror_gives_the_genuine_leader_bundle(self, tmp_path: Path) -> None:
        bundle = mirror_source(tmp_path).load(LAYOUT, "v2.7.0", "leader")
        assert bundle.sha256 == LEADER_SHA
        assert len(bundle.objects) == 15
        kinds = [o["kind"] for o in bundle.objects]
        assert kinds.count("CustomResourceDefinition") == 4 and "Namespace" not in kinds
        assert bundle.origins == (str(MIRROR / "antrea" / "v2.7.0" / "antrea-multicluster-leader.yml"),)

    def test_env_var_is_the_mirror_when_the_fleet_names_none(self, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(ENV_MIRROR, str(MIRROR))
        source = BundleSource(cache_dir=tmp_path / "cache", fetch=refusing_fetch)
        bundle = source.load(LAYOUT, "v2.7.0", "member")
        assert bundle.sha256 == MEMBER_SHA

    def test_missing_version_in_mirror_names_the_layout_and_env_var(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError) as err:
            mirror_source(tmp_path).load(LAYOUT, "v9.9.9", "leader")
        text = str(err.value)
        assert "antrea/v9.9.9/antrea-multicluster-leader.yml" in text
        assert ENV_MIRROR in text and "<stack>/<version>/<file>" in text

    def test_without_mirror_or_network_the_error_names_the_env_var(self, tmp_path: Path) -> None:
        source = BundleSource(cache_dir=tmp_path / "cache", fetch=refusing_fetch)
        with pytest.raises(BundleError) as err:
            source.load(LAYOUT, "v2.7.0", "leader")
        text = str(err.value)
        assert RELEASE + "/v2.7.0/antrea-multicluster-leader.yml" in text
        assert ENV_MIRROR in text and "network is unreachable" in text
        assert not (tmp_path / "cache" / "antrea").exists()

    def test_download_fills_the_cache_and_is_not_repeated(self, tmp_path: Path) -> None:
        genuine = (MIRROR / "antrea/v2.7.0/antrea-multicluster-member.yml").read_bytes()
        calls: list[str] = []

        def fetch(url: str) -> bytes:
            calls.append(url)
            return genuine

        source = BundleSource(cache_dir=tmp_path / "cache", fetch=fetch, pins={"member": MEMBER_SHA})
        first = source.load(LAYOUT, "v2.7.0", "member")
        second = source.load(LAYOUT, "v2.7.0", "member")
        assert calls == [RELEASE + "/v2.7.0/antrea-multicluster-member.yml"]
        assert (tmp_path / "cache/antrea/v2.7.0/antrea-multicluster-member.yml").read_bytes() == genuine
        assert first.objects == second.objects and len(first.objects) == 14
        assert second.origins[0].startswith(str(tmp_path / "cache"))

    def test_downloaded_bytes_failing_their_pin_are_never_cached(self, tmp_path: Path) -> None:
        source = BundleSource(cache_dir=tmp_path / "cache", fetch=lambda url: b"kind: Tampered\n",
                              pins={"antrea-multicluster-member.yml": MEMBER_SHA})
        with pytest.raises(BundleError, match="does not match its sha256 pin"):
            source.load(LAYOUT, "v2.7.0", "member")
        assert not (tmp_path / "cache/antrea/v2.7.0/antrea-multicluster-member.yml").exists()

    @pytest.mark.parametrize("version", ["../v2.7.0", "latest", "v2.7", "v2.7.0/../../x"])
    def test_versions_that_are_not_release_tags_are_refused(self, tmp_path: Path, version: str) -> None:
        with pytest.raises(BundleError, match="invalid antrea version"):
            mirror_source(tmp_path).load(LAYOUT, version, "leader")

    def test_unknown_role(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError, match="roles: leader, member, split"):
            mirror_source(tmp_path).load(LAYOUT, "v2.7.0", "hub")


class TestPins:
    def test_matching_role_pin_with_prefix_passes(self, tmp_path: Path) -> None:
        source = mirror_source(tmp_path, leader="sha256:" + LEADER_SHA.upper())
        bundle = source.load(LAYOUT, "v2.7.0", "leader")
        assert bundle.sha256 == LEADER_SHA

    def test_mismatching_pin_fails_before_parsing(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError) as err:
            mirror_source(tmp_path, leader=MEMBER_SHA).load(LAYOUT, "v2.7.0", "leader")
        assert f"expected {MEMBER_SHA}, got {LEADER_SHA}" in str(err.value)
        assert not (tmp_path / "cache" / "parsed").exists()

    def test_multi_file_role_pin_is_the_concatenation(self, tmp_path: Path) -> None:
        files = LAYOUT.files["split"]
        joined = b"".join((MIRROR / "antrea/v2.7.0" / f).read_bytes() for f in files)
        source = mirror_source(tmp_path, split=hashlib.sha256(joined).hexdigest())
        bundle = source.load(LAYOUT, "v2.7.0", "split")
        assert [o["kind"] for o in bundle.objects][:4] == ["CustomResourceDefinition"] * 4
        assert len(bundle.objects) == 15

    def test_per_file_pin(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError, match=r"manifest antrea-multicluster-leader-global\.yml"):
            mirror_source(tmp_path, **{"antrea-multicluster-leader-global.yml": "0" * 64}).load(
                LAYOUT, "v2.7.0", "split")

    def test_malformed_pin(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError, match="is not a sha256"):
            mirror_source(tmp_path, leader="abc").load(LAYOUT, "v2.7.0", "leader")


class TestParsing:
    def test_parse_cache_is_written_and_reused(self, tmp_path: Path) -> None:
        mirror_source(tmp_path).load(LAYOUT, "v2.7.0", "member")
        (parsed,) = (tmp_path / "cache" / "parsed").iterdir()
        cached = json.loads(parsed.read_text())
        cached[0]["metadata"]["name"] = "from-the-cache"
        parsed.write_text(json.dumps(cached))
        again = mirror_source(tmp_path).load(LAYOUT, "v2.7.0", "member")
        assert again.objects[0]["metadata"]["name"] == "from-the-cache"

    def test_lists_flatten_and_empty_documents_are_skipped(self) -> None:
        item = "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}"
        text = f"---\n---\nkind: List\napiVersion: v1\nitems:\n- {item}\n"
        expected = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}]
        assert parse_manifests(text, "x.yaml") == expected

    @pytest.mark.parametrize(("text", "problem"), [
        ("- a\n- b\n", "expected a mapping"),
        ("apiVersion: v1\nmetadata: {name: a}\n", "missing kind"),
        ("apiVersion: v1\nkind: ConfigMap\n", "missing metadata.name"),
        ("a: [b\n", "not valid YAML"),
    ])
    def test_malformed_documents(self, text: str, problem: str) -> None:
        with pytest.raises(BundleError, match=problem):
            parse_manifests(text, "x.yaml")


class TestRendering:
    @pytest.fixture(autouse=True)
    def _warm(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.source = warm_source(tmp_path_factory)

    def leader(self, tmp_path: Path, namespace: str) -> list[dict[str, Any]]:
        bundle = self.source.load(LAYOUT, "v2.7.0", "leader")
        return render_objects(bundle.objects, RenderOptions(
            version="v2.7.0", upstream_namespace="antrea-multicluster", namespace=namespace))

    def test_leader_moves_wholly_into_the_fleet_namespace(self, tmp_path: Path) -> None:
        objs = self.leader(tmp_path, "mc-north")
        non_crd = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
        assert "antrea-multicluster" not in json.dumps(non_crd)
        by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objs}
        assert by_kind[("Role", "antrea-mc-member-cluster-role")]["metadata"]["namespace"] == "mc-north"
        crb = by_kind[("ClusterRoleBinding", "mc-north-antrea-mc-controller-webhook-rolebinding")]
        assert crb["roleRef"]["name"] == "mc-north-antrea-mc-controller-webhook-role"
        subject = {"kind": "ServiceAccount", "name": "antrea-mc-controller", "namespace": "mc-north"}
        assert crb["subjects"] == [subject]
        vwc = by_kind[("ValidatingWebhookConfiguration",
                       "mc-north-antrea-mc-validating-webhook-configuration")]
        assert vwc["metadata"]["labels"]["served-in"] == "mc-north"
        for hook in vwc["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "mc-north"
            assert hook["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "mc-north"
        assert all("creationTimestamp" not in o["metadata"] for o in objs)

    def test_crds_are_left_untouched(self, tmp_path: Path) -> None:
        bundle = self.source.load(LAYOUT, "v2.7.0", "leader")
        crds = [o for o in bundle.objects if o["kind"] == "CustomResourceDefinition"]
        rendered = [o for o in self.leader(tmp_path, "mc-north") if o["kind"] == "CustomResourceDefinition"]
        for before, after in zip(crds, rendered, strict=True):
            before = json.loads(json.dumps(before))
            before["metadata"].pop("creationTimestamp", None)
            before.pop("status", None)
            assert after == before

    def test_render_is_pure(self, tmp_path: Path) -> None:
        bundle = self.source.load(LAYOUT, "v2.7.0", "member")
        snapshot = json.dumps(bundle.objects)
        render_objects(bundle.objects, RenderOptions("v2.7.0", "kube-system", "mc-member"))
        assert json.dumps(bundle.objects) == snapshot

    def test_member_bundle_images_pinned_and_overridable(self, tmp_path: Path) -> None:
        bundle = self.source.load(LAYOUT, "v2.7.0", "member")
        pinned = render_objects(bundle.objects, RenderOptions("v2.7.0", "kube-system", "kube-system"))
        (deploy,) = [o for o in pinned if o["kind"] == "Deployment"]
        assert image_of(deploy) == "antrea/antrea-mc-controller:v2.7.0"
        assert deploy["metadata"]["namespace"] == "kube-system"
        override = RenderOptions("v2.7.0", "kube-system", "kube-system",
                                 images={"antrea/antrea-mc-controller": "registry.local:5000/mc:v2.7.0-fix"})
        (deploy,) = [o for o in render_objects(bundle.objects, override) if o["kind"] == "Deployment"]
        assert image_of(deploy) == "registry.local:5000/mc:v2.7.0-fix"

    @pytest.mark.parametrize(("image", "expected"), [
        ("antrea/antrea-mc-controller:latest", "antrea/antrea-mc-controller:v2.7.0"),
        ("antrea/antrea-mc-controller", "antrea/antrea-mc-controller:v2.7.0"),
        ("registry:5000/antrea/mc", "registry:5000/antrea/mc:v2.7.0"),
        ("antrea/antrea-mc-controller:v2.6.0", "antrea/antrea-mc-controller:v2.6.0"),
        ("antrea/mc@sha256:" + "a" * 64, "antrea/mc@sha256:" + "a" * 64),
    ])
    def test_pinned_image(self, image: str, expected: str) -> None:
        assert pinned_image(image, RenderOptions("v2.7.0")) == expected

    def test_split_image_keeps_registry_port(self) -> None:
        assert split_image("reg:5000/a/b:1.0@sha256:x") == ("reg:5000/a/b", "1.0", "sha256:x")

    def test_namespace_is_set_on_namespaced_objects_without_one(self) -> None:
        objs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                 "metadata": {"name": "r"}}]
        out = render_objects(objs, RenderOptions("v1.3.1", namespace="ocm"))
        assert out[0]["metadata"] == {"name": "c", "namespace": "ocm"}
        assert out[1]["metadata"] == {"name": "r"}

    def test_address_of(self, tmp_path: Path) -> None:
        objs = self.leader(tmp_path, "mc-north")
        addrs = {str(address_of("north", o)) for o in objs}
        assert "north/rbac.authorization.k8s.io/Role/mc-north/antrea-mc-member-cluster-role" in addrs
        crd = "north/apiextensions.k8s.io/CustomResourceDefinition/-/clustersets.multicluster.crd.antrea.io"
        assert crd in addrs
        assert "north/core/Service/mc-north/antrea-mc-webhook-service" in addrs
        assert Address.parse("north/core/Service/mc-north/antrea-mc-webhook-service") in {
            address_of("north", o) for o in objs}
