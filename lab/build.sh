#!/usr/bin/env bash
# Build the lab's control-plane binaries from pinned Go wrapper modules into a cache keyed by version.
#
#   lab/build.sh            build (or reuse) kube-apiserver, kube-controller-manager, kube-scheduler,
#                           kubectl, etcd and kwok; print the bin directory on the last line
#   lab/build.sh --print    print the bin directory without building
#   lab/build.sh --helm     build (or reuse) only helm; print its path on the last line
#   lab/build.sh --print-helm   print helm's path without building
#
# The cache lives in $FLEETPLAN_LAB_CACHE (default: ${XDG_CACHE_HOME:-~/.cache}/fleetplan/lab).
# A bin directory is complete when its `.complete` stamp exists, so an interrupted build is redone.
# No Kubernetes source is committed: the wrapper modules under lab/go hold only go.mod, go.sum and
# a tools.go-free `tool` directive; Go fetches everything from the module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=$(sed -n 's/^KUBERNETES_VERSION=//p' "$here/versions.env")
ETCD_VERSION=$(sed -n 's/^ETCD_VERSION=//p' "$here/versions.env")
KWOK_VERSION=$(sed -n 's/^KWOK_VERSION=//p' "$here/versions.env")
HELM_VERSION=$(sed -n 's/^HELM_VERSION=//p' "$here/versions.env")
cache=${FLEETPLAN_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetplan/lab}
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
bin="$cache/$key/bin"
helm_dir="$cache/helm-${HELM_VERSION}"
# helm has its own cache entry and stamp, so adding or bumping it never invalidates the
# (long) Kubernetes build above.
build_helm() {
  if [ -f "$helm_dir/.complete" ]; then return 0; fi
  mkdir -p "$helm_dir"
  echo "building helm $HELM_VERSION into $helm_dir" >&2
  (cd "$here/go/helm" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$helm_dir/helm" helm.sh/helm/v3/cmd/helm)
  touch "$helm_dir/.complete"
}
if [ "${1:-}" = "--print" ]; then echo "$bin"; exit 0; fi
if [ "${1:-}" = "--print-helm" ]; then echo "$helm_dir/helm"; exit 0; fi
if [ "${1:-}" = "--helm" ]; then build_helm; echo "$helm_dir/helm"; exit 0; fi
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
start=$(date +%s)

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
v=k8s.io/component-base/version; c=k8s.io/client-go/pkg/version
ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
ld="$ld -X $v.gitCommit=0000000000000000000000000000000000000000 -X $v.buildDate=1970-01-01T00:00:00Z"
ld="$ld -X $c.gitVersion=$K8S_VERSION -X $c.gitMajor=1 -X $c.gitMinor=$minor"
echo "building Kubernetes $K8S_VERSION control plane into $bin" >&2
(cd "$here/go/k8s" && go build -trimpath -ldflags "$ld" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
echo "building etcd $ETCD_VERSION" >&2
(cd "$here/go/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
echo "building kwok $KWOK_VERSION" >&2
(cd "$here/go/kwok" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
"$bin/kube-apiserver" --version >&2
echo "built in $(( $(date +%s) - start ))s; $(du -sh "$bin" | cut -f1) of binaries" >&2
touch "$bin/.complete"
echo "$bin"
