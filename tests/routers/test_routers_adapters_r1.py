"""The Router-R1 evaluation adapter maps the policy's chosen pool name to the eval set's candidate."""

import numpy as np

from rlrouter.routers.adapters import PolicyRouter


class ScriptedPolicy:
    def __init__(self, picks):
        self.picks = picks

    def route_batch(self, prompts):
        return [{"selected_model": self.picks[p]} for p in prompts]


def test_policy_router_maps_pool_names_and_defaults_when_unrouted():
    cands = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]
    name_map = {"mixtral-8x7b-instruct": cands[0], "gpt-4-1106-preview": cands[1]}
    policy = ScriptedPolicy({"a": "mixtral-8x7b-instruct", "b": "gpt-4-1106-preview", "c": None, "d": "nope"})
    r = PolicyRouter("r1", policy, cands, name_map, default=0)
    assert r.decide(["a", "b", "c", "d"]).tolist() == [0, 1, 0, 0]
    assert r.unrouted == 2
    assert r.report() == {"policy_routes": {"mixtral-8x7b-instruct": 1, "gpt-4-1106-preview": 1, "none": 1, "nope": 1},
                          "unrouted": 2}
    assert isinstance(r.decide([]), np.ndarray)
