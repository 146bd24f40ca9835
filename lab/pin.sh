#!/usr/bin/env bash
# Regenerate the wrapper modules' go.mod/go.sum for the versions in lab/versions.env.
# The k8s.io staging `replace` lines are derived from k8s.io/kubernetes's own go.mod as served by the
# module proxy (every staging module k8s.io/X@v0.0.0 => k8s.io/X@v0.<minor>.<patch>), never typed by hand.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
staging=v0.${KUBERNETES_VERSION#v1.}

cd "$here/go/k8s"
rm -f go.mod go.sum
go mod init fleetplan.dev/lab/k8s >/dev/null 2>&1
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
go mod edit -go="$(sed -n 's/^go //p' "$gomod")"
for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*|\1|p' "$gomod"); do
  go mod edit -replace="$m=$m@$staging"
done
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES_VERSION" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBERNETES_VERSION" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$KUBERNETES_VERSION" \
  "k8s.io/kubernetes/cmd/kubectl@$KUBERNETES_VERSION"

cd "$here/go/etcd"
rm -f go.mod go.sum
go mod init fleetplan.dev/lab/etcd >/dev/null 2>&1
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"

cd "$here/go/kwok"
rm -f go.mod go.sum
go mod init fleetplan.dev/lab/kwok >/dev/null 2>&1
go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

# helm (charts/fleetplan is linted and rendered with it in tests); cached apart from Kubernetes.
cd "$here/go/helm"
rm -f go.mod go.sum
go mod init fleetplan.dev/lab/helm >/dev/null 2>&1
go get -tool "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
