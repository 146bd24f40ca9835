BASE = """\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata:
  name: demo
spec:
  stack: antrea
  version: v2.7.0
  clusterSet:
    name: demo-set
  leader:
    name: north
    kubeconfig: ./north.yaml
  members:
    - name: west
      kubeconfig: ./west.yaml
    - name: east
      kubeconfig: ./east.yaml
"""
