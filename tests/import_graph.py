"""The import graph of the project, read from the AST: rooms, floors, cycles and upward imports.

A *room* is a sub-package of ``rlrouter/`` (``rlrouter/learner/``), a top-level module of it
(``rlrouter/protocol.py``), or one of the wiring folders ``jobs/``, ``serve/``, ``benchmarks/``.
Every ``import``/``from ... import`` of a project module is an edge between two files; it counts
once per statement and name-target, whether it sits at the top or inside a function (a function-local
import still points somewhere; it only hides it).

Measured:
- *cycles*: strongly connected sets of two or more files (Python executes those imports in a circle);
- *upward imports*: file imports whose room edge points against the floor order. Without a given
  layer order the floors are made from the room graph itself: inside each circle of rooms the lighter
  direction (fewer import statements) is the one that runs up, and is dropped; the floor of a room is
  then one above the highest room it imports;
- *floors*: how many levels that order has;
- *local imports*: imports of project modules inside function bodies.

``tests/test_architecture.py`` checks the contract with :data:`LAYERS`; run this module to print the
numbers (``python -m tests.import_graph [ROOT]``) for any checkout, e.g. one made with ``git archive``.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlrouter", "jobs", "serve", "benchmarks")

# The house from the top floor down (docs/architecture.md): a room may import only rooms on a lower line;
# rooms on one line do not import each other. Top-level modules of rlrouter/ are rooms of their own.
LAYERS: list[tuple[str, ...]] = [
    ("benchmarks", "jobs", "serve", "rlrouter.cli"),                    # entry points, thin
    ("rlrouter.trainer", "rlrouter.serving"),                           # the controller; request -> decision
    ("rlrouter.learner", "rlrouter.eval"),                              # learner ranks; offline evaluation
    ("rlrouter.routers",),                                              # routers: what evaluation and serving run
    ("rlrouter.rollout",),                                              # router env, vLLM workers, policy
    ("rlrouter.pool", "rlrouter.gmt", "rlrouter.intent"),
    ("rlrouter.data", "rlrouter.rewards", "rlrouter.engine", "rlrouter.embeddings", "rlrouter.jobkit"),
    ("rlrouter.algos", "rlrouter.sync", "rlrouter.distributed", "rlrouter.selector", "rlrouter.protocol",
     "rlrouter.models", "rlrouter.storage", "rlrouter.metrics", "rlrouter.progress", "rlrouter.paths",
     "rlrouter.config", "rlrouter.env_check", "rlrouter.provenance", "rlrouter"),              # the ground: imports no other room
]


@dataclass(frozen=True)
class Edge:
    """One import statement's target: ``src`` file imports ``dst`` module (both dotted names)."""

    src: str
    dst: str
    line: int
    local: bool  # inside a function body


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)

    @property
    def file_edges(self) -> set[tuple[str, str]]:
        return {(e.src, e.dst) for e in self.edges if e.src != e.dst}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def collect(root: Path = ROOT) -> Graph:
    """Every project module under ``root`` and every import of another project module."""
    modules: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" not in path.parts and "results" not in path.parts:
                modules[module_name(path, root)] = path
    graph = Graph(modules)
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, local in _imports(tree):
            for dst in _targets(node, name, is_pkg, modules):
                graph.edges.append(Edge(name, dst, node.lineno, local))
    return graph


def _imports(tree: ast.AST):
    """(import node, inside a function?) for every import in the tree."""

    def walk(node: ast.AST, local: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local
            else:
                yield from walk(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                   ast.Lambda)))

    yield from walk(tree, False)


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_pkg: bool, modules: dict[str, Path]):
    """The project modules one import statement loads (a submodule when ``from pkg import sub``)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            mod = _known(alias.name, modules)
            if mod:
                yield mod
        return
    base = node.module or ""
    if node.level:
        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    seen = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        mod = sub if sub in modules else _known(base, modules)
        if mod and mod not in seen:
            seen.add(mod)
            yield mod


def _known(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is a project module."""
    parts = dotted.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return None


def room(module: str) -> str:
    """``rlrouter.learner.group`` -> ``rlrouter.learner``; ``jobs.x`` -> ``jobs``; ``rlrouter.models`` stays."""
    parts = module.split(".")
    if parts[0] != "rlrouter":
        return parts[0]
    return ".".join(parts[:2])


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected sets of two or more files (Tarjan), each sorted, largest first."""
    adj: dict[str, set[str]] = defaultdict(set)
    for a, b in graph.file_edges:
        adj[a].add(b)
    return [c for c in _scc(list(graph.modules), adj) if len(c) > 1]


def _scc(nodes: list[str], adj: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def room_weights(graph: Graph) -> dict[tuple[str, str], int]:
    """Import statements between two different rooms, by (importer room, imported room)."""
    w: dict[tuple[str, str], int] = defaultdict(int)
    for e in graph.edges:
        a, b = room(e.src), room(e.dst)
        if a != b:
            w[(a, b)] += 1
    return dict(w)


def derived_floors(graph: Graph) -> dict[str, int]:
    """Floor of every room (0 = ground) from the room graph alone, for trees without a layer order.

    While the room graph has a circle, the lightest room edge on a circle is taken to be the one that
    runs up and is set aside; then each room sits one floor above the highest room it imports.
    """
    weights = room_weights(graph)
    rooms = sorted({room(m) for m in graph.modules})
    kept = dict(weights)
    while True:
        adj: dict[str, set[str]] = defaultdict(set)
        for a, b in kept:
            adj[a].add(b)
        comps = [c for c in _scc(rooms, adj) if len(c) > 1]
        if not comps:
            break
        inside = [(w, e) for e, w in kept.items() if any(e[0] in c and e[1] in c for c in comps)]
        _, lightest = min(inside, key=lambda x: (x[0], x))
        del kept[lightest]
    floor: dict[str, int] = {}

    def level(r: str) -> int:
        if r not in floor:
            floor[r] = 0
            floor[r] = 1 + max((level(b) for (a, b) in kept if a == r), default=-1)
        return floor[r]

    for r in rooms:
        level(r)
    return floor


def layer_floors(layers: list[tuple[str, ...]] = LAYERS) -> dict[str, int]:
    """Floor of every room named in a top-down layer list (0 = ground)."""
    return {r: len(layers) - 1 - i for i, line in enumerate(layers) for r in line}


def upward(graph: Graph, floors: dict[str, int]) -> list[Edge]:
    """Imports whose importer's room is not above the imported room (same-floor imports between two
    rooms count: a floor holds rooms that do not know each other)."""
    out = []
    for e in graph.edges:
        a, b = room(e.src), room(e.dst)
        if a != b and floors.get(a, 0) <= floors.get(b, 0):
            out.append(e)
    return out


def summary(graph: Graph, floors: dict[str, int]) -> dict[str, object]:
    rlrouter = [e for e in graph.edges if e.src.startswith("rlrouter") and e.dst.startswith("rlrouter")]
    lines = sum(len(p.read_text().splitlines()) for m, p in graph.modules.items() if m.startswith("rlrouter"))
    used = {room(m) for m in graph.modules}
    return {
        "rooms": len(used),
        "floors": len({floors.get(r, 0) for r in used}),
        "cycles": len(cycles(graph)),
        "upward imports": len(upward(graph, floors)),
        "imports between rlrouter modules": len(rlrouter),
        "function-local among them": sum(e.local for e in rlrouter),
        "rlrouter lines": lines,
    }


def draw(graph: Graph, floors: dict[str, int], path: str | Path, title: str) -> None:
    """The house as a PNG: one row per floor (top floor on top), a box per room sized by its lines, and
    a grey arrow for every room that imports another (darker: more import statements)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    lines: dict[str, int] = defaultdict(int)
    for m, p in graph.modules.items():
        lines[room(m)] += len(p.read_text().splitlines())
    by_floor: dict[int, list[str]] = defaultdict(list)
    for r in sorted(lines, key=lambda r: -lines[r]):
        by_floor[floors.get(r, 0)].append(r)
    width, gap, height = 100.0, 1.0, 1.0
    box: dict[str, tuple[float, float, float]] = {}  # room -> (x, y, w)
    fig, ax = plt.subplots(figsize=(16, 1.3 * (len(by_floor) + 1)))
    for f, rooms in by_floor.items():
        y = 2.0 * f
        ws = [max(4.0, lines[r] ** 0.5) for r in rooms]
        scale = min(1.0, (width - gap * (len(rooms) - 1)) / sum(ws))
        x = 0.0
        for r, w in zip(rooms, ws):
            w *= scale
            box[r] = (x, y, w)
            ax.add_patch(Rectangle((x, y), w, height, facecolor="#dde6f0", edgecolor="#34495e"))
            label = r.removeprefix("rlrouter.") + ("/" if any(m.startswith(r + ".") for m in graph.modules) else "")
            ax.text(x + w / 2, y + height / 2, f"{label}\n{lines[r]}", ha="center", va="center", fontsize=7)
            x += w + gap
        ax.text(-1.5, y + height / 2, f"floor {f}", ha="right", va="center", fontsize=8)
    weights = room_weights(graph)
    top = max(weights.values(), default=1)
    for (a, b), n in weights.items():
        (xa, ya, wa), (xb, yb, wb) = box[a], box[b]
        up = floors.get(a, 0) <= floors.get(b, 0)
        ax.add_patch(FancyArrowPatch((xa + wa / 2, ya), (xb + wb / 2, yb + height), arrowstyle="-|>",
                                     mutation_scale=6, linewidth=0.4 + 1.6 * n / top,
                                     color="#c0392b" if up else (0.2, 0.2, 0.2, 0.15 + 0.6 * n / top)))
    ax.set_xlim(-8, width + 1)
    ax.set_ylim(-0.5, 2.0 * max(by_floor) + height + 0.5)
    ax.axis("off")
    s = summary(graph, floors)
    ax.set_title(f"{title}: {s['rooms']} rooms on {s['floors']} floors, {s['cycles']} import cycles, "
                 f"{s['upward imports']} upward imports (red); arrows point from importer down to imported",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    png = None
    if "--png" in argv:
        i = argv.index("--png")
        png, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    root = Path(argv[0]).resolve() if argv else ROOT
    graph = collect(root)
    floors = derived_floors(graph)
    if png:
        draw(graph, floors, png, root.name)
    print(f"{root} (floors derived from the room graph)")
    for k, v in summary(graph, floors).items():
        print(f"  {k}: {v}")
    for c in cycles(graph):
        print("  cycle:", " <-> ".join(c))
    for e in upward(graph, floors):
        print(f"  up: {e.src}:{e.line} -> {e.dst}")
    by_floor: dict[int, list[str]] = defaultdict(list)
    for r, f in floors.items():
        by_floor[f].append(r)
    for f in sorted(by_floor, reverse=True):
        print(f"  floor {f}: {', '.join(sorted(by_floor[f]))}")


if __name__ == "__main__":
    main(sys.argv[1:])
