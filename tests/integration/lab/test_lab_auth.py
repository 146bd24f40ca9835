"""Authentication and authorization in the lab are the real ones: tokens, RBAC, CSRs, bootstrap tokens."""

from __future__ import annotations

import base64
import datetime
import secrets
import string
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from labkit import wait_until, whoami

pytestmark = pytest.mark.integration


def _service_account(core, ns, name):
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))


def _token_request(core, ns, name):
    spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    return core.create_namespaced_service_account_token(name, ns, client.AuthenticationV1TokenRequest(spec=spec)
                                                        ).status.token


def test_service_account_token_secret_is_filled_and_token_request_authenticates(lab, lab_client, lab_namespace):
    cluster = lab.clusters[0]
    core = client.CoreV1Api(lab_client(cluster))
    ns = lab_namespace(cluster)
    _service_account(core, ns, "robot")
    core.create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="robot-token",
                                     annotations={"kubernetes.io/service-account.name": "robot"}),
        type="kubernetes.io/service-account-token"))

    def filled():
        data = core.read_namespaced_secret("robot-token", ns).data or {}
        return data if "token" in data else None
    data = wait_until("the token controller to fill robot-token", filled)
    assert base64.b64decode(data["ca.crt"]) == Path(cluster.ca).read_bytes()
    legacy = base64.b64decode(data["token"]).decode()
    assert whoami(lab_client(cluster, token=legacy))[0] == f"system:serviceaccount:{ns}:robot"

    requested = _token_request(core, ns, "robot")
    user, groups = whoami(lab_client(cluster, token=requested))
    assert user == f"system:serviceaccount:{ns}:robot"
    assert "system:serviceaccounts" in groups
    # The token is bound to this cluster's issuer and key: another cluster rejects it.
    with pytest.raises(client.ApiException) as denied:
        whoami(lab_client(lab.clusters[1], token=requested))
    assert denied.value.status == 401


def _can_list_pods(api, ns):
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(namespace=ns, verb="list", resource="pods")))
    return client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed


def test_rbac_denies_an_unprivileged_service_account_until_a_role_binding(lab, lab_client, lab_namespace):
    cluster = lab.clusters[1]
    admin = lab_client(cluster)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    ns = lab_namespace(cluster)
    _service_account(core, ns, "reader")
    reader = lab_client(cluster, token=_token_request(core, ns, "reader"))

    assert _can_list_pods(reader, ns) is False
    with pytest.raises(client.ApiException) as denied:
        client.CoreV1Api(reader).list_namespaced_pod(ns)
    assert denied.value.status == 403

    rbac.create_namespaced_role(ns, client.V1Role(
        metadata=client.V1ObjectMeta(name="pod-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])]))
    rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="reader-reads-pods"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=ns)]))

    wait_until("the RoleBinding to take effect", lambda: _can_list_pods(reader, ns), timeout=30)
    assert client.CoreV1Api(reader).list_namespaced_pod(ns).items == []
    # Still nothing beyond the Role: another namespace stays forbidden.
    assert _can_list_pods(reader, "kube-system") is False


def test_approved_csr_yields_a_certificate_that_authenticates(lab, lab_client, tmp_path):
    cluster = lab.clusters[2]
    certs = client.CertificatesV1Api(lab_client(cluster))
    user = f"lab-user-{secrets.token_hex(3)}"
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "lab-group"),
                                    x509.NameAttribute(NameOID.COMMON_NAME, user)]))
           .sign(key, hashes.SHA256()))
    name = f"csr-{user}"
    certs.create_certificate_signing_request(client.V1CertificateSigningRequest(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1CertificateSigningRequestSpec(
            request=base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
            signer_name="kubernetes.io/kube-apiserver-client", usages=["client auth"],
            expiration_seconds=3600)))
    try:
        body = certs.read_certificate_signing_request(name)
        body.status.conditions = [client.V1CertificateSigningRequestCondition(
            type="Approved", status="True", reason="LabTest", message="approved by the lab test")]
        certs.replace_certificate_signing_request_approval(name, body)

        issued = wait_until("the CSR signer to issue the certificate",
                            lambda: certs.read_certificate_signing_request(name).status.certificate)
        cert_path, key_path = tmp_path / "user.crt", tmp_path / "user.key"
        cert_path.write_bytes(base64.b64decode(issued))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        leaf = x509.load_pem_x509_certificate(cert_path.read_bytes())
        ca = x509.load_pem_x509_certificate(Path(cluster.ca).read_bytes())
        assert leaf.issuer == ca.subject
        user_seen, groups = whoami(lab_client(cluster, cert=(cert_path, key_path)))
        assert user_seen == user
        assert "lab-group" in groups
    finally:
        certs.delete_certificate_signing_request(name)


def test_bootstrap_token_secret_authenticates_as_system_bootstrap(lab, lab_client):
    cluster = lab.clusters[0]
    core = client.CoreV1Api(lab_client(cluster))
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    token_secret = "".join(secrets.choice(alphabet) for _ in range(16))
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    name = f"bootstrap-token-{token_id}"
    core.create_namespaced_secret("kube-system", client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), type="bootstrap.kubernetes.io/token",
        string_data={"token-id": token_id, "token-secret": token_secret,
                     "usage-bootstrap-authentication": "true",
                     "expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    try:
        user, groups = whoami(lab_client(cluster, token=f"{token_id}.{token_secret}"))
        assert user == f"system:bootstrap:{token_id}"
        assert "system:bootstrappers" in groups
        with pytest.raises(client.ApiException) as denied:
            whoami(lab_client(cluster, token=f"{token_id}.{'x' * 16}"))
        assert denied.value.status == 401
    finally:
        core.delete_namespaced_secret(name, "kube-system")
