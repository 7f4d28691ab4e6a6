"""Session affinity: the pin rules (rlrouter.selector.affinity) and the selector's ``stick``."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from rlrouter.selector import Selector, SelectorConfig
from rlrouter.selector.affinity import Pin, mark_error, summary, turn
from rlrouter.selector.config import SelectorConfigError
from rlrouter.selector.selector import SelectionRequest, SelectorError

CANDS = ["a", "b", "c"]
RULE = {"margin": None, "move_on_error": True, "ttl_s": 3600.0, "max_sessions": 100}


def test_first_turn_pins_and_later_turns_hold_whatever_the_decision_proposes():
    pins: OrderedDict = OrderedDict()
    v = turn(pins, "s1", "a", CANDS, {}, 0.0, **RULE)
    assert (v.model, v.outcome, v.turn) == ("a", "new", 1)
    v = turn(pins, "s1", "b", CANDS, {"a": 0.1, "b": 0.9}, 1.0, **RULE)
    assert (v.model, v.outcome, v.proposed, v.turn, v.moves) == ("a", "held", "b", 2, 0)
    v = turn(pins, "s1", "a", CANDS, {}, 2.0, **RULE)
    assert (v.model, v.outcome) == ("a", "kept")
    # another session is its own
    assert turn(pins, "s2", "c", CANDS, {}, 3.0, **RULE).outcome == "new"
    assert summary(pins) == {"sessions": 2, "turns": 4, "moves": 0, "moves_per_session": 0.0,
                             "by_model": {"a": 1, "c": 1}}


def test_each_rule_that_lets_a_session_move():
    pins: OrderedDict = OrderedDict()
    turn(pins, "s", "a", CANDS, {}, 0.0, **RULE)
    # the pin is not among this turn's candidates (removed, restricted, a replay without the prompt)
    v = turn(pins, "s", "b", ["b", "c"], {}, 1.0, **RULE)
    assert (v.model, v.outcome, v.reason, v.moves) == ("b", "moved", "unavailable", 1)
    # the pin's call failed: the next turn moves; a failure of another model marks nothing
    assert not mark_error(pins, "s", "a") and not mark_error(pins, "nobody", "b")
    assert mark_error(pins, "s", "b")
    v = turn(pins, "s", "c", CANDS, {}, 2.0, **RULE)
    assert (v.model, v.reason, v.moves) == ("c", "error", 2)
    # ... unless moving on error is off
    mark_error(pins, "s", "c")
    assert turn(pins, "s", "a", CANDS, {}, 3.0, **{**RULE, "move_on_error": False}).outcome == "held"
    # a margin: a score gap at least that large moves, a smaller one holds
    rule = {**RULE, "margin": 0.3}
    pins = OrderedDict()
    turn(pins, "m", "a", CANDS, {}, 0.0, **rule)
    assert turn(pins, "m", "b", CANDS, {"a": 0.5, "b": 0.7}, 1.0, **rule).outcome == "held"
    v = turn(pins, "m", "b", CANDS, {"a": 0.4, "b": 0.75}, 2.0, **rule)
    assert (v.model, v.reason) == ("b", "margin")
    assert summary(pins)["moves_per_session"] == 1.0


def test_pins_expire_after_the_ttl_and_the_least_recent_go_first():
    pins: OrderedDict = OrderedDict()
    rule = {**RULE, "ttl_s": 10.0, "max_sessions": 2}
    turn(pins, "old", "a", CANDS, {}, 0.0, **rule)
    turn(pins, "mid", "b", CANDS, {}, 5.0, **rule)
    turn(pins, "old", "c", CANDS, {}, 6.0, **rule)  # seen again: now the most recent
    turn(pins, "new", "c", CANDS, {}, 7.0, **rule)  # over 2 sessions: 'mid' goes
    assert list(pins) == ["old", "new"]
    assert turn(pins, "old", "b", CANDS, {}, 20.0, **rule).outcome == "new"  # 14 s unseen > ttl


def test_selector_stick_moves_the_decisions_feedback_to_the_pin_and_saves_the_pins(tmp_path):
    path = str(tmp_path / "sel.json")
    cfg = SelectorConfig(seed=0, session_affinity=True, storage_path=path, min_samples=0)
    sel = Selector(cfg, CANDS)
    first = sel.select(SelectionRequest(CANDS, user_id="u"))
    assert sel.stick(first.request_id, "s:u:1", first.scores)["outcome"] == "new"
    pinned = first.model
    other = next(c for c in CANDS if c != pinned)
    dec = sel.select(SelectionRequest([other], user_id="u"))  # the only candidate offered: the pin is not
    assert sel.stick(dec.request_id, "s:u:1", dec.scores)["reason"] == "unavailable"
    dec = sel.select(SelectionRequest(CANDS, user_id="u"))
    v = sel.stick(dec.request_id, "s:u:1", dec.scores)
    assert v["model"] == other and sel.pending(dec.request_id).model == other
    u = sel.feedback(dec.request_id, outcome="win")
    assert [d.model for d in u.deltas] == [other]  # the feedback is the called model's
    with pytest.raises(SelectorError, match="already pinned"):
        sel.stick(dec.request_id, "s:u:1", dec.scores)
    assert sel.stats()["affinity"]["sessions"] == 1 and sel.stats()["affinity"]["moves"] == 1
    sel.save()
    again = Selector(cfg, CANDS)
    again.load()
    assert again.state.pins["s:u:1"].to_list() == sel.state.pins["s:u:1"].to_list()
    assert isinstance(again.state.pins["s:u:1"], Pin)


def test_several_candidates_are_not_pinned_and_bad_config_names_the_field():
    sel = Selector(SelectorConfig(seed=0, session_affinity=True), CANDS)
    dec = sel.select_top_k(SelectionRequest(CANDS), k=2)
    with pytest.raises(SelectorError, match="pins one"):
        sel.stick(dec.request_id, "s", dec.scores)
    for bad, field_ in (({"affinity_margin": -0.1}, "affinity_margin"), ({"affinity_ttl_s": "soon"}, "affinity_ttl_s"),
                        ({"max_affinity_sessions": 0}, "max_affinity_sessions"),
                        ({"session_affinity": "yes"}, "session_affinity")):
        with pytest.raises(SelectorConfigError) as e:
            SelectorConfig.from_dict(bad)
        assert e.value.field == field_
    assert SelectorConfig.from_dict({"affinity_ttl_s": "30m"}).affinity_ttl_s == 1800.0


def test_a_malformed_pin_in_a_snapshot_names_it():
    from rlrouter.selector.persistence import decode_state, encode_state
    from rlrouter.selector.state import SelectorState

    doc = encode_state(SelectorState())
    doc["pins"] = {"s:u:1": ["a", 1, -1, 0.0, False]}
    with pytest.raises(ValueError, match=r"pins\.s:u:1"):
        decode_state(doc)
