"""Layering: no import cycles between any two of kvtier's modules.

``lint-imports`` (run by ``make test``; contracts in ``pyproject.toml``) checks the
layers; this checks what a layers contract cannot: that no module reaches itself
again through imports, function-level imports included (grimp reads them all).
"""

from __future__ import annotations

import grimp

PACKAGES = ("kvtier", "sim", "real", "traces", "hwprofiles", "analysis")


def strongly_connected(adj: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in adj:
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_tarjan_finds_a_hand_made_cycle() -> None:
    adj = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert strongly_connected(adj) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES)
    mods = sorted(graph.modules)
    adj = {m: sorted(graph.find_modules_directly_imported_by(m) & set(mods)) for m in mods}
    assert len(mods) > 100  # the whole code base was read
    assert strongly_connected(adj) == []
