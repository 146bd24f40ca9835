"""Reading and writing clusters: the only package that imports `kubernetes`.

- `kubeconfigs`: which cluster to reach and how (`ClusterAccess`), CA pins, connecting.
- `clusters`: the small `Cluster` protocol and `KubeCluster`, raw REST with a request counter;
  every client error is translated here into `ClusterError` naming the cluster.
- `reading`: batched, parallel reads into a `Snapshot`, ownership labels, fingerprints.
- `readiness`: what "ready" means per `ReadinessKind`, and waiting for it.
- `handlers`: how each `Handler` converges and removes a resource; a registry stacks can extend.
"""
