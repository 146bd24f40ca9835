"""The dependency graph of desired resources: the only home of networkx.

`building.build_graph` turns a stack's `DesiredResource`s into a `ResourceGraph` whose nodes are
`Address`es and whose edges point from a dependency to its dependent. Creation order is a
deterministic topological order; deletion order is its reverse.
"""
