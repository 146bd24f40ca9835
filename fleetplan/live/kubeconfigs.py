"""Which cluster to reach and how: `ClusterAccess` values and turning them into API clients.

Invariants:
- A `ClusterAccess` serialises (`as_dict`, into plan files and the state) to paths and names only,
  never credentials. Credentials are loaded by the kubernetes client's own loader at connect time,
  which runs exec plugins and token files as kubectl would.
- In controller mode a kubeconfig comes from a Secret: the access carries the Secret's reference
  (`kubeconfig_secret`, serialised) and the parsed kubeconfig (`kubeconfig_data`, in memory only:
  excluded from `as_dict`, equality and repr). An access read back from the state has the
  reference but no data; whoever can read the Secret (the controller) fills it in with
  `access_from_kubeconfig`, and connecting without it is a ClusterError naming the Secret.
- With `ca_sha256` set, the CA in the kubeconfig must hash (SHA-256 of its SubjectPublicKeyInfo,
  kubeadm's `--discovery-token-ca-cert-hash` form) to the pin before any request is made; TLS then
  verifies the server against that CA, so the pin holds for every connection.
- Credential files the client writes (CA, client certificate and key) go to this process's private
  directory (`keyfiles`), never loose into $TMPDIR, and are swept after a crash.
- Exec plugins run under `exec_guard`: a plugin that hangs is killed with its process group after
  EXEC_TIMEOUT_SECONDS (also when the client re-runs it to refresh an expired credential), and
  the cluster fails with a one-line error naming it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetplan.errors import ClusterError
from fleetplan.live import keyfiles

# An exec credential plugin that never answers would hang the run: the client waits for it without
# a timeout. The guard kills it (and its process group) after this long, then the cluster fails.
EXEC_TIMEOUT_SECONDS = 30.0
# Loading a kubeconfig is bounded too, with room for the guard to start and report first.
_LOAD_SLACK_SECONDS = 15.0
EXEC_GUARD = str(Path(__file__).with_name("exec_guard.py"))


@dataclass(frozen=True)
class SecretRef:
    """Where a kubeconfig is kept on the management cluster: a key of a Secret."""

    namespace: str
    name: str
    key: str = "kubeconfig"

    def describe(self) -> str:
        return f"Secret {self.namespace}/{self.name} (key {self.key})"


@dataclass(frozen=True)
class ClusterAccess:
    name: str  # the cluster ID used in addresses
    kubeconfig: str | None = None  # default: $KUBECONFIG, then ~/.kube/config
    context: str | None = None  # default: the kubeconfig's current-context
    ca_sha256: str | None = None  # "sha256:<hex>"
    kubeconfig_secret: SecretRef | None = None  # controller mode: the kubeconfig's Secret
    kubeconfig_data: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def kubeconfig_path(self) -> str:
        if self.kubeconfig:
            return os.path.expanduser(self.kubeconfig)
        env = os.environ.get("KUBECONFIG", "")
        first = env.split(os.pathsep)[0] if env else ""
        return first or os.path.expanduser("~/.kube/config")

    def source(self) -> str:
        """Where the kubeconfig comes from, for messages."""
        if self.kubeconfig_secret is not None:
            return f"kubeconfig {self.kubeconfig_secret.describe()}"
        return f"kubeconfig {self.kubeconfig_path()}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kubeconfig": self.kubeconfig,
            "context": self.context,
            "caSha256": self.ca_sha256,
        }
        if self.kubeconfig_secret is not None:
            ref = self.kubeconfig_secret
            out["kubeconfigSecret"] = {"namespace": ref.namespace, "name": ref.name, "key": ref.key}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterAccess:
        ref = data.get("kubeconfigSecret")
        secret = SecretRef(str(ref["namespace"]), str(ref["name"]), str(ref.get("key") or "kubeconfig")) \
            if isinstance(ref, Mapping) else None
        return cls(data["name"], data.get("kubeconfig"), data.get("context"), data.get("caSha256"), secret)


def access_from_kubeconfig(access: ClusterAccess, raw: bytes) -> ClusterAccess:
    """`access` with the kubeconfig text `raw` (read from its Secret) parsed into memory."""
    import yaml

    where = access.source()
    try:
        data = yaml.safe_load(raw.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ClusterError(f"cluster {access.name}: {where} is not a kubeconfig (not YAML: "
                           f"{type(err).__name__})", hint="store a kubeconfig file in that key") from None
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        raise ClusterError(f"cluster {access.name}: {where} is not a kubeconfig (no clusters list)",
                           hint="store a kubeconfig file in that key")
    return replace(access, kubeconfig=None, kubeconfig_data=data)


def new_api_client(access: ClusterAccess) -> Any:
    """A `kubernetes.client.ApiClient` for `access`, after checking the CA pin."""
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    data = access.kubeconfig_data
    if data is not None:
        where = access.source()

        def load(configuration: Any) -> None:
            kube_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                config_dict=copy.deepcopy(dict(data)), context=access.context, client_configuration=configuration,
                persist_config=False, temp_file_path=str(keyfiles.private_dir()))
    elif access.kubeconfig_secret is not None:
        raise ClusterError(
            f"cluster {access.name}: its {access.source()} is on the management cluster; only the "
            "controller that manages this fleet reads it",
            hint="let the controller reconcile the fleet, or give the cluster a kubeconfig file",
        )
    else:
        path = access.kubeconfig_path()
        where = f"kubeconfig {path}"
        if not Path(path).is_file():
            raise ClusterError(
                f"cluster {access.name}: kubeconfig {path} does not exist",
                hint="set kubeconfig for this cluster in fleet.yaml or export KUBECONFIG",
            )

        def load(configuration: Any) -> None:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=access.context, client_configuration=configuration,
                temp_file_path=str(keyfiles.private_dir()))

    try:
        client = _load_client(access, where, load)
    except (ConfigException, OSError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise ClusterError(
            f"cluster {access.name}: cannot load {where}"
            f"{' context ' + access.context if access.context else ''}: {err}"
        ) from err
    if access.ca_sha256:
        ca_file = client.configuration.ssl_ca_cert
        if not ca_file:
            raise ClusterError(
                f"cluster {access.name}: caSha256 is set but the kubeconfig has no CA",
                hint="add certificate-authority-data to the kubeconfig's cluster entry",
            )
        actual = ca_spki_sha256(Path(ca_file).read_bytes())
        if actual != access.ca_sha256.lower():
            raise ClusterError(
                f"cluster {access.name}: the kubeconfig's CA does not match the pinned "
                f"caSha256 (it is {actual})",
                hint="check that the kubeconfig points at the right cluster; update the "
                "pin only if the cluster's CA was rotated on purpose",
            )
    return client


def ca_spki_sha256(pem_or_b64: bytes) -> str:
    """`sha256:<hex>` of the first certificate's SubjectPublicKeyInfo (kubeadm's CA hash)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    data = pem_or_b64 if b"-----BEGIN" in pem_or_b64 else base64.b64decode(pem_or_b64)
    cert = x509.load_pem_x509_certificate(data)
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


class _ExecFailures(logging.Filter):
    """Catches what the kubernetes client logs (and otherwise ignores) when an exec plugin fails:
    it goes on without credentials, and the user would see a baffling 'system:anonymous' error."""

    def __init__(self) -> None:
        super().__init__()
        self.by_thread: dict[int | None, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if "kubernetes" in record.pathname.replace(os.sep, "/") and record.levelno >= logging.ERROR:
            self.by_thread.setdefault(record.thread, record.getMessage())
            return False
        return True


def _load_client(access: ClusterAccess, where: str, load: Callable[[Any], None]) -> Any:
    """An ApiClient whose configuration `load` fills, in a daemon thread bounded by the exec
    timeout (plus slack for the guard); an exec plugin failure the client only logs becomes a
    ClusterError naming the cluster."""
    from kubernetes.client import ApiClient, Configuration

    _guard_exec_plugins()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            configuration = Configuration()
            load(configuration)
            outcome["client"] = ApiClient(configuration=configuration)
        except BaseException as err:  # re-raised in the caller's thread
            outcome["error"] = err

    failures = _ExecFailures()
    root = logging.getLogger()
    root.addFilter(failures)
    try:
        worker = threading.Thread(target=work, name=f"kubeconfig-{access.name}", daemon=True)
        worker.start()
        worker.join(EXEC_TIMEOUT_SECONDS + _LOAD_SLACK_SECONDS)
    finally:
        root.removeFilter(failures)
    if worker.is_alive():
        raise ClusterError(
            f"cluster {access.name}: loading {where} did not finish within "
            f"{EXEC_TIMEOUT_SECONDS + _LOAD_SLACK_SECONDS:.0f}s",
            hint="check that its files are readable and its exec credential plugin answers",
        )
    if "error" in outcome:
        raise outcome["error"]
    failure = failures.by_thread.get(worker.ident)
    if failure is not None:
        raise ClusterError(
            f"cluster {access.name}: the credential plugin of {where} failed: {failure}",
            hint="run the plugin command by hand; it must exit 0 and print an ExecCredential",
        )
    return outcome["client"]


_guard_installed = threading.Lock()


def _guard_exec_plugins() -> None:
    """Make the client run every exec plugin under `exec_guard` (once per process).

    The client builds its `ExecProvider` from the module it lives in each time it (re)loads
    credentials, so replacing that one name covers first loads and expiry refreshes alike."""
    from kubernetes.config import kube_config
    from kubernetes.config.exec_provider import ExecProvider

    with _guard_installed:
        if getattr(getattr(kube_config, "ExecProvider"), "fleetplan_guarded", False):  # noqa: B009
            return

        class GuardedExecProvider(ExecProvider):
            fleetplan_guarded = True

            def __init__(self, exec_config: Any, cwd: Any, cluster: Any = None) -> None:
                super().__init__(exec_config, cwd, cluster)  # type: ignore[no-untyped-call]
                self.args = [sys.executable, "-I", EXEC_GUARD, f"{EXEC_TIMEOUT_SECONDS:g}", "--", *self.args]

        setattr(kube_config, "ExecProvider", GuardedExecProvider)  # noqa: B010
