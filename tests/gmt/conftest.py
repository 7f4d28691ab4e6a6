"""A small real personalization set shared by the GMTRouter tests (real MiniLM, real RouteLLM rows)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def small_logged(shared_data):
    """Three RouteLLM files (GSM8K + two MMLU subjects): real outcomes, loaded in a second."""
    from rlrouter.data.logged import load_routellm

    root = shared_data / "routellm"
    return load_routellm([root / "gsm8k" / "gsm8k_responses.csv", root / "mmlu" / "mmlu_philosophy.csv",
                          root / "mmlu" / "mmlu_high_school_mathematics.csv"])


@pytest.fixture(scope="session")
def small_sim(small_logged):
    from rlrouter.gmt.simulate import SimConfig, simulate_personalization

    cfg = SimConfig(num_users=16, sessions_per_user=6, turns="geometric", mean_turns=2.0, max_turns=4,
                    pool_size=80, seed=3)
    return simulate_personalization(small_logged, cfg)


@pytest.fixture(scope="session")
def small_graph(small_sim):
    from rlrouter.gmt.graph import build_graph

    return build_graph(small_sim.records, llms=small_sim.llms)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """These graphs are tiny: one thread avoids the spin-waits of an oversubscribed 2-core box."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
