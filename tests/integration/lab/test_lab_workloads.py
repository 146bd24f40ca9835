"""Workloads really run in the lab: Deployments roll out on the kwok node, namespaces finalize."""

from __future__ import annotations

import ipaddress
import uuid

import pytest
from kubernetes import client
from labkit import wait_until

pytestmark = pytest.mark.integration


def _deployment(name: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=1, selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="registry.invalid/app:1")]))))


def test_deployment_becomes_available_on_the_kwok_node(lab, lab_client, lab_namespace):
    cluster = lab.clusters[0]
    api = lab_client(cluster)
    ns = lab_namespace(cluster)
    client.AppsV1Api(api).create_namespaced_deployment(ns, _deployment("web"))

    def available():
        status = client.AppsV1Api(api).read_namespaced_deployment_status("web", ns).status
        return status.available_replicas == 1
    wait_until("deployment web to have availableReplicas 1", available)

    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="app=web").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.spec.node_name == f"{cluster.name}-node-1"
    assert pod.status.phase == "Running"
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(cluster.pod_cidr)
    node = client.CoreV1Api(api).read_node(pod.spec.node_name)
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"


def test_deleting_a_namespace_completes(lab, lab_client):
    api = lab_client(lab.clusters[1])
    core = client.CoreV1Api(api)
    name = f"t-ns-deletion-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Content the namespace controller must remove first, including a rolled-out workload.
    core.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm")))
    client.AppsV1Api(api).create_namespaced_deployment(name, _deployment("doomed"))
    wait_until("a pod of the doomed deployment",
               lambda: core.list_namespaced_pod(name).items)
    core.delete_namespace(name)

    def gone():
        try:
            core.read_namespace(name)
        except client.ApiException as err:
            return err.status == 404
        return False
    wait_until(f"namespace {name} to be deleted", gone, timeout=120)
