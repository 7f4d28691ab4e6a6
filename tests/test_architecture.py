"""The import contract of the house (docs/architecture.md): no import cycles, every import points down
the layer order of ``tests.import_graph.LAYERS``, every room is placed in it, and one public name means
one thing across ``rlrouter/``. Read from the AST: nothing is imported, so it runs in a second."""

from __future__ import annotations

import ast
from collections import defaultdict

import pytest

from tests.import_graph import LAYERS, ROOT, Edge, Graph, collect, cycles, layer_floors, room, upward


@pytest.fixture(scope="module")
def graph() -> Graph:
    return collect(ROOT)


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_every_room_has_a_floor(graph):
    placed = layer_floors()
    assert sorted({room(m) for m in graph.modules} - set(placed)) == [], \
        "a new room: place it in tests/import_graph.py LAYERS (and docs/architecture.md)"


def test_imports_point_down(graph):
    up = [f"{e.src}:{e.line} -> {e.dst}" for e in upward(graph, layer_floors())]
    assert up == [], "imports that point up (or sideways) the layers of tests/import_graph.py"


def test_the_contract_catches_a_cycle_and_an_upward_import(graph):
    """The checks above are not vacuous: a learner module importing the trainer breaks both rules."""
    bad = Graph(graph.modules, [*graph.edges, Edge("rlrouter.learner.group", "rlrouter.trainer.router_r1", 1, True),
                                Edge("rlrouter.trainer.router_r1", "rlrouter.learner.group", 1, False)])
    assert ["rlrouter.learner.group", "rlrouter.trainer.router_r1"] in cycles(bad)
    assert any(e.src == "rlrouter.learner.group" for e in upward(bad, layer_floors()))


def test_layers_name_each_room_once():
    names = [r for line in LAYERS for r in line]
    assert len(names) == len(set(names))


# Same-named public functions that are the same thing in each module: the entry of a job
# (``run``, ``main``) or of a trainer (``fit``), each reached through its own module.
SAME_ROLE = {"run", "main", "fit"}


def test_one_public_name_means_one_thing(graph):
    where: dict[str, list[str]] = defaultdict(list)
    for module, path in graph.modules.items():
        if not module.startswith("rlrouter"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    not node.name.startswith("_"):
                where[node.name].append(module)
    dups = {n: sorted(set(ms)) for n, ms in where.items() if len(set(ms)) > 1 and n not in SAME_ROLE}
    assert dups == KNOWN_DUPLICATES, "a public name defined in two modules: name each for what it is"


KNOWN_DUPLICATES: dict[str, list[str]] = {
    "RouterR1Policy": ["rlrouter.rollout.policy", "rlrouter.serving.router_r1_client"],
    "evaluate": ["rlrouter.gmt.train", "rlrouter.intent.supervised"],
    "is_placeholder": ["rlrouter.protocol", "rlrouter.serving.config"],
    "load_checkpoint": ["rlrouter.gmt.train", "rlrouter.learner.checkpoint"],
    "match_name": ["rlrouter.protocol", "rlrouter.serving.context"],
    "prepare": ["rlrouter.data.job", "rlrouter.gmt.job"],
    "save_checkpoint": ["rlrouter.gmt.train", "rlrouter.learner.checkpoint"],
    "summarize": ["rlrouter.eval.metrics", "rlrouter.eval.route_scores"],
    "train_worker": ["rlrouter.gmt.job", "rlrouter.intent.job"],
    "unwrap": ["rlrouter.distributed.launcher", "rlrouter.serving.selector_client"],
}
"""Public names still defined in two modules, left to rename: the list can only shrink (the test fails
when a name is added, and when one is renamed without taking it off here)."""


def test_routers_live_in_routers_and_serving_reads_no_evaluation(graph):
    """One house for routers: ``rlrouter/eval/`` defines no router class, and ``rlrouter/serving/`` imports the
    routers it serves from ``rlrouter/routers/``, never evaluation code."""
    in_eval = [f"{m}.{node.name}" for m, path in graph.modules.items() if m.startswith("rlrouter.eval")
               for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)
               and any(getattr(b, "id", getattr(b, "attr", "")).endswith("Router") for b in node.bases)]
    assert in_eval == [], "router classes in rlrouter/eval/ (their place is rlrouter/routers/)"
    serving_eval = [f"{e.src}:{e.line} -> {e.dst}" for e in graph.edges
                    if e.src.startswith("rlrouter.serving") and e.dst.startswith("rlrouter.eval")]
    assert serving_eval == [], "rlrouter/serving/ imports evaluation code"
