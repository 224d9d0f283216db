"""T-Control-style hub lock: never evict the storages most paths run through.

T-Control (2024) keeps "hub" tensors, those with high betweenness in the
computation graph, out of eviction, so that rematerialization chains do not
keep re-deriving them. Here the storage graph (parent storage -> child
storage for every op) is ranked by betweenness centrality, estimated with
Brandes' algorithm from a fixed, evenly spaced set of sources, and the top 1%
is locked once per trace. Everything else is DTR.
"""

from collections import deque

import numpy as np

from dtrforensics.policy import policy, ratio

HUB_FRACTION = 0.01
SOURCES = 64


def storage_graph(program):
    """Children of every storage: an edge parent -> child for each op argument."""
    storage = program.tensor_storage
    children = {int(s): set() for s in program.storage_ids()}
    for op in range(program.n_ops):
        outs = {int(storage[t]) for t in program.op_outputs_of(op)}
        for arg in program.op_args_of(op):
            parent = int(storage[arg])
            children[parent].update(o for o in outs if o != parent)
    return {s: sorted(c) for s, c in children.items()}


def betweenness(children, sources):
    """Brandes' betweenness from `sources` (unweighted, directed)."""
    score = dict.fromkeys(children, 0.0)
    for s in sources:
        order, preds = [], {v: [] for v in children}
        sigma, dist = dict.fromkeys(children, 0), dict.fromkeys(children, -1)
        sigma[s], dist[s] = 1, 0
        queue = deque([s])
        while queue:
            v = queue.popleft()
            order.append(v)
            for w in children[v]:
                if dist[w] < 0:
                    dist[w] = dist[v] + 1
                    queue.append(w)
                if dist[w] == dist[v] + 1:
                    sigma[w] += sigma[v]
                    preds[w].append(v)
        delta = dict.fromkeys(children, 0.0)
        for w in reversed(order):
            for v in preds[w]:
                delta[v] += sigma[v] / sigma[w] * (1.0 + delta[w])
            if w != s:
                score[w] += delta[w]
    return score


def hubs(program):
    """The top HUB_FRACTION of storages by estimated betweenness."""
    children = storage_graph(program)
    nodes = sorted(children)
    picks = np.linspace(0, len(nodes) - 1, min(SOURCES, len(nodes))).astype(int)
    score = betweenness(children, [nodes[i] for i in sorted(set(picks))])
    ranked = sorted(nodes, key=lambda v: (-score[v], v))
    return ranked[:max(1, int(len(nodes) * HUB_FRACTION))]


@policy(locked=hubs)
def dtr_hub_lock(compute, size, staleness):
    """DTR that never evicts the top 1% of storages by betweenness."""
    return ratio(compute, size, staleness)
