"""Text renderings of a `ResourceGraph` for `fleetplan graph`: Graphviz DOT and Mermaid.

Output is deterministic (nodes in creation order, edges sorted) so it can be diffed and golden-tested.
Node labels are address strings; Mermaid needs identifiers without slashes, so nodes are numbered.
"""

from __future__ import annotations

from fleetplan.graph.building import ResourceGraph


def to_dot(graph: ResourceGraph) -> str:
    lines = ["digraph fleet {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
    for address in graph.creation_order():
        lines.append(f'  "{address}";')
    for before, after, why in graph.edges():
        lines.append(f'  "{before}" -> "{after}" [label="{why}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(graph: ResourceGraph) -> str:
    order = graph.creation_order()
    ids = {address: f"n{i}" for i, address in enumerate(order)}
    lines = ["flowchart LR"]
    for address in order:
        lines.append(f'  {ids[address]}["{address}"]')
    for before, after, why in graph.edges():
        lines.append(f"  {ids[before]} -->|{why}| {ids[after]}")
    return "\n".join(lines) + "\n"
