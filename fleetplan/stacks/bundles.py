"""Manifest bundles: where a stack's upstream YAML for one release comes from, and how it is shaped.

A *bundle* is the list of Kubernetes objects a stack installs for one role (Antrea `leader` and
`member`, OCM `hub` and `spoke`) at one release `version`. This module owns, for both stacks:

- **Source.** The files of a role are looked up, in this order, in
  1. the mirror directory (`spec.manifests.mirror`, else the environment variable
     `FLEETPLAN_MIRROR`), laid out `<stack>/<version>/<file>`; with a mirror set nothing else is
     consulted, so an air-gapped run never reaches for the network by accident;
  2. the local cache (`FLEETPLAN_CACHE_DIR`, else `$XDG_CACHE_HOME/fleetplan/bundles`, else
     `~/.cache/fleetplan/bundles`), same layout, filled by earlier downloads;
  3. the stack's release location, `BundleLayout.release_url` with `{version}` and `{file}`
     filled in (Antrea: `https://github.com/antrea-io/antrea/releases/download/{version}/{file}`).
     This download is the only network access in `stacks`; it happens only when neither a mirror
     nor a cached copy exists, and its failure says which variable to set.
- **Pins.** `spec.manifests.sha256` maps a role (or a single file name) to a sha256. For a role of
  one file it is that file's `sha256sum`; for a role of several files, the sha256 of the files
  concatenated in layout order (`cat a b | sha256sum`). Pins are checked on the raw bytes before
  anything is parsed, cached or rendered, so nothing unpinned can reach a cluster.
- **Parsing.** Multi-document YAML into plain JSON-like dicts; parsed files are cached as JSON
  keyed by content hash, because the Antrea leader file alone takes ~0.4 s to parse.
- **Rendering.** `render_objects` is pure: it moves namespaced objects, RBAC subjects, webhook
  service references and namespace selectors from the namespace upstream targets to the fleet's,
  and pins `:latest` (or untagged) images to `version` unless the fleet overrides the image.

Invariants: the objects handed out are fresh copies (callers may mutate them); no function here
ever returns bytes whose pin did not match.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fleetplan.addrs import Address
from fleetplan.errors import ConfigError

ENV_MIRROR = "FLEETPLAN_MIRROR"
ENV_CACHE = "FLEETPLAN_CACHE_DIR"
_VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?$")
_SHA256 = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")
_PARSER_REVISION = "1"  # bump when the parsed form changes, so stale parse caches are ignored

Manifest = dict[str, Any]
Fetcher = Callable[[str], bytes]

# Kinds that are cluster-scoped even when a manifest forgets to say so; for any other kind the
# presence of metadata.namespace decides, since custom kinds cannot be known without discovery.
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "APIService",
    "PriorityClass", "StorageClass", "PersistentVolume", "Node", "CertificateSigningRequest",
    "RuntimeClass", "IngressClass", "CSIDriver",
})
NAMESPACED_KINDS = frozenset({
    "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret", "Service", "Deployment",
    "DaemonSet", "StatefulSet", "Job", "CronJob", "Pod", "Endpoints", "PodDisruptionBudget",
    "NetworkPolicy", "Lease",
})


class BundleError(ConfigError):
    """A bundle could not be found, fetched, verified or parsed."""


@dataclass(frozen=True)
class BundleLayout:
    """What a stack's bundles are made of: per role, the files (relative to `<stack>/<version>/`)
    in apply order, the namespace upstream wrote into them, and the release URL template."""

    stack: str
    files: Mapping[str, tuple[str, ...]]
    upstream_namespace: Mapping[str, str]
    release_url: str  # "{version}" and "{file}" are substituted

    def url(self, version: str, file: str) -> str:
        return self.release_url.format(version=version, file=file)


@dataclass(frozen=True)
class Bundle:
    """The parsed objects of one role at one version, and where they came from."""

    stack: str
    version: str
    role: str
    objects: tuple[Manifest, ...]
    sha256: str  # of the role as defined for pins (see the module docstring)
    origins: tuple[str, ...]  # mirror paths, cache paths or URLs, one per file

    def fresh_objects(self) -> list[Manifest]:
        return copy.deepcopy(list(self.objects))


@dataclass(frozen=True)
class BundleSource:
    """Where to look for bundles. `mirror` None means: use `FLEETPLAN_MIRROR` if set."""

    mirror: Path | None = None
    cache_dir: Path | None = None
    fetch: Fetcher | None = None  # None: urllib with a timeout; tests pass a fake
    pins: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, mirror: str | os.PathLike[str] | None = None,
                         pins: Mapping[str, str] | None = None) -> BundleSource:
        chosen = mirror if mirror is not None else os.environ.get(ENV_MIRROR) or None
        return cls(mirror=Path(chosen).expanduser() if chosen else None,
                   cache_dir=default_cache_dir(), pins=dict(pins or {}))

    def load(self, layout: BundleLayout, version: str, role: str) -> Bundle:
        return load_bundle(layout, version, role, self)


def default_cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetplan" / "bundles"


def load_bundle(layout: BundleLayout, version: str, role: str, source: BundleSource) -> Bundle:
    """Read, verify and parse the files of `role`; raises `BundleError` with a hint on any failure."""
    if not _VERSION.match(version):
        raise BundleError(f"invalid {layout.stack} version {version!r}",
                          hint="write a release tag such as v2.7.0")
    if role not in layout.files:
        raise BundleError(f"{layout.stack} has no bundle role {role!r}",
                          hint=f"roles: {', '.join(sorted(layout.files))}")
    files = layout.files[role]
    raw: list[bytes] = []
    origins: list[str] = []
    for name in files:
        data, origin = _read_file(layout, version, name, source)
        _check_pin(source.pins, name, data, origin)
        raw.append(data)
        origins.append(origin)
    digest = hashlib.sha256(b"".join(raw)).hexdigest()
    pin = source.pins.get(role)
    if pin is not None:
        _compare_pin(pin, digest, f"{layout.stack} {version} bundle {role!r}", ", ".join(origins))
    objects: list[Manifest] = []
    for data, origin in zip(raw, origins, strict=True):
        objects.extend(_parse_cached(data, origin, source.cache_dir))
    return Bundle(layout.stack, version, role, tuple(objects), digest, tuple(origins))


def _read_file(layout: BundleLayout, version: str, name: str, source: BundleSource) -> tuple[bytes, str]:
    relative = Path(layout.stack) / version / name
    mirror = source.mirror
    if mirror is None and os.environ.get(ENV_MIRROR):
        mirror = Path(os.environ[ENV_MIRROR]).expanduser()
    if mirror is not None:
        path = mirror / relative
        if not path.is_file():
            raise BundleError(
                f"manifest {relative} not found in mirror {mirror}",
                hint=f"the mirror (spec.manifests.mirror or ${ENV_MIRROR}) must be laid out "
                     f"<stack>/<version>/<file>; expected the file {path}")
        return path.read_bytes(), str(path)
    cache = source.cache_dir or default_cache_dir()
    cached = cache / relative
    if cached.is_file():
        return cached.read_bytes(), str(cached)
    url = layout.url(version, name)
    try:
        data = (source.fetch or _fetch_url)(url)
    except (OSError, urllib.error.URLError, ValueError) as err:
        raise BundleError(
            f"cannot download {url}: {err}",
            hint=f"offline or air-gapped? set ${ENV_MIRROR} or spec.manifests.mirror to a directory "
                 f"laid out <stack>/<version>/<file> (here: {relative})") from None
    _check_pin(source.pins, name, data, url)  # never cache bytes that fail their pin
    _atomic_write(cached, data)
    return data, url


def _fetch_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body


def _check_pin(pins: Mapping[str, str], name: str, data: bytes, origin: str) -> None:
    for key in (name, Path(name).name):
        if key in pins:
            _compare_pin(pins[key], hashlib.sha256(data).hexdigest(), f"manifest {name}", origin)
            return


def _compare_pin(pin: str, actual: str, what: str, origin: str) -> None:
    match = _SHA256.match(pin.strip().lower())
    if match is None:
        raise BundleError(f"sha256 pin for {what} is not a sha256: {pin!r}",
                          hint="write 64 hex digits, optionally prefixed 'sha256:'")
    if match.group(1) != actual:
        raise BundleError(
            f"{what} does not match its sha256 pin: expected {match.group(1)}, got {actual} "
            f"(read from {origin})",
            hint="the file changed since it was pinned; verify its origin, then update "
                 "spec.manifests.sha256")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _parse_cached(data: bytes, origin: str, cache_dir: Path | None) -> list[Manifest]:
    key = hashlib.sha256(data + _PARSER_REVISION.encode()).hexdigest()
    parsed_path = (cache_dir or default_cache_dir()) / "parsed" / f"{key}.json"
    try:
        cached = json.loads(parsed_path.read_text())
        if isinstance(cached, list):
            return cached
    except (OSError, ValueError):
        pass
    objects = parse_manifests(data, origin)
    with contextlib.suppress(OSError):  # a read-only cache only costs speed
        _atomic_write(parsed_path, json.dumps(objects).encode())
    return objects


def parse_manifests(data: bytes | str, origin: str) -> list[Manifest]:
    """Multi-document YAML -> objects; empty documents are skipped, `List`s are flattened."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    documents: list[Any] | None = None
    if origin.endswith(".json"):  # one JSON document (or List): json is ~100x faster than the YAML parser
        with contextlib.suppress(ValueError):
            documents = [json.loads(text)]
    if documents is None:  # YAML, or a .json file that is not plain JSON (e.g. several documents)
        try:
            documents = list(YAML(typ="safe").load_all(io.StringIO(text)))
        except YAMLError as err:
            raise BundleError(f"{origin}: not valid YAML: {err}".replace("\n", " ")) from None
    objects: list[Manifest] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        items = doc.get("items", []) if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items:
            problem = _shape_problem(item)
            if problem:
                raise BundleError(f"{origin}: document {index + 1}: {problem}",
                                  hint="a bundle holds Kubernetes objects only")
            objects.append(json.loads(json.dumps(item)))  # plain, JSON-safe types only
    return objects


def _shape_problem(item: object) -> str | None:
    if not isinstance(item, dict):
        return f"expected a mapping, found {type(item).__name__}"
    for key in ("apiVersion", "kind"):
        if not isinstance(item.get(key), str):
            return f"missing {key}"
    meta = item.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return "missing metadata.name"
    return None


def is_namespaced(obj: Mapping[str, Any]) -> bool:
    kind = obj.get("kind", "")
    if kind in CLUSTER_SCOPED_KINDS:
        return False
    return kind in NAMESPACED_KINDS or bool(obj.get("metadata", {}).get("namespace"))


def address_of(cluster: str, obj: Mapping[str, Any]) -> Address:
    """The Address of a manifest object on `cluster`."""
    api_version: str = obj["apiVersion"]
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    meta = obj["metadata"]
    namespace = meta.get("namespace", "") if is_namespaced(obj) else ""
    return Address(cluster, group, obj["kind"], namespace or "", meta["name"])


@dataclass(frozen=True)
class RenderOptions:
    """How to shape a bundle for one fleet. `images` maps an upstream image (repository, or the
    full reference) to the reference to use instead; anything else at `:latest` gets `version`."""

    version: str
    upstream_namespace: str | None = None
    namespace: str | None = None
    images: Mapping[str, str] = field(default_factory=dict)
    # Rename cluster-scoped objects named "<upstream namespace>-..." too, so two installs in two
    # namespaces do not fight over one ClusterRole (what upstream's `sed` instructions amount to).
    rename_prefixed: bool = True


def render_objects(objects: Sequence[Manifest], options: RenderOptions) -> list[Manifest]:
    """Pure: copies of `objects` moved to `options.namespace` with images pinned."""
    rendered: list[Manifest] = []
    for original in objects:
        obj = copy.deepcopy(original)
        meta = obj.setdefault("metadata", {})
        if meta.get("creationTimestamp", "") is None:
            del meta["creationTimestamp"]  # a generator artefact that would only add diff noise
        obj.pop("status", None)
        if options.namespace and options.upstream_namespace:
            _move_namespace(obj, options.upstream_namespace, options.namespace, options.rename_prefixed)
        elif options.namespace and is_namespaced(obj) and not meta.get("namespace"):
            meta["namespace"] = options.namespace
        if obj.get("kind") != "CustomResourceDefinition":
            _pin_images(obj, options)
        rendered.append(obj)
    return rendered


def _move_namespace(obj: Manifest, old: str, new: str, rename_prefixed: bool) -> None:
    meta = obj["metadata"]
    if is_namespaced(obj):
        if meta.get("namespace") in (None, "", old):
            meta["namespace"] = new
    elif rename_prefixed and meta["name"].startswith(old + "-") and old != new:
        meta["name"] = new + meta["name"][len(old):]
    labels = meta.get("labels") or {}
    for key, value in list(labels.items()):
        if value == old:  # e.g. `served-in: antrea-multicluster` on webhook configurations
            labels[key] = new
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and subject.get("namespace") == old:
            subject["namespace"] = new
    role_ref = obj.get("roleRef")
    if rename_prefixed and isinstance(role_ref, dict) and role_ref.get("kind") == "ClusterRole":
        name = role_ref.get("name", "")
        if name.startswith(old + "-") and old != new:
            role_ref["name"] = new + name[len(old):]
    for hook in obj.get("webhooks") or []:
        service = (hook.get("clientConfig") or {}).get("service") or {}
        if service.get("namespace") == old:
            service["namespace"] = new
        match_labels = (hook.get("namespaceSelector") or {}).get("matchLabels") or {}
        if match_labels.get("kubernetes.io/metadata.name") == old:
            match_labels["kubernetes.io/metadata.name"] = new


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """`repo[:tag][@digest]` -> (repo, tag, digest); a registry port is not mistaken for a tag."""
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1:], digest
    return image, None, digest


def _pin_images(node: Any, options: RenderOptions) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                node[key] = pinned_image(value, options)
            else:
                _pin_images(value, options)
    elif isinstance(node, list):
        for item in node:
            _pin_images(item, options)


def pinned_image(image: str, options: RenderOptions) -> str:
    repo, tag, digest = split_image(image)
    for key in (image, repo):
        if key in options.images:
            return options.images[key]
    if digest is None and tag in (None, "latest"):
        return f"{repo}:{options.version}"
    return image
