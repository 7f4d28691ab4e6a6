"""The replay backend on the real RouteLLM logged outcomes in ../shared/data/routellm."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from rlrouter.data.logged import normalize_prompt
from rlrouter.pool import Candidate, CandidatePool, PoolConfigError
from rlrouter.pool.options import OptionError
from rlrouter.pool.replay import ReplayBackend

ROOT = Path(__file__).resolve().parents[2]
GPT4, MIXTRAL = "gpt-4-1106-preview", "mistralai/Mixtral-8x7B-Instruct-v0.1"
DUCKS = "Janet’s ducks lay 16 eggs per day."
HOUSE = "Josh decides to try flipping a house."
FIELD_EXT = "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q."
S5 = "Let p = (1, 2, 5, 4)(2, 3) in S_5 . Find the index of <p> in S_5."


def replay(table, model=GPT4, price=(10.0, 30.0), **opts) -> ReplayBackend:
    c = Candidate("c", price_in=price[0], price_out=price[1], options={"model": model, **opts})
    return ReplayBackend(c, table=table)


def row_starting(table, text: str) -> int:
    return next(i for i, p in enumerate(table.prompts) if p.startswith(text))


def test_table_is_the_real_routellm_data(routellm_table):
    t = routellm_table
    assert len(t) == 13074 and set(t.models) == {GPT4, MIXTRAL}
    gsm = t.where_source("gsm8k")
    assert len(gsm) == 1319 and len(t.where_source("mmlu")) == 11755
    acc = gsm.accuracy()  # the README's figures: Mixtral 63.8 %, GPT-4 85.7 %
    assert round(acc[MIXTRAL], 3) == 0.638 and round(acc[GPT4], 3) == 0.857
    assert gsm.responses is not None and t.responses[GPT4][row_starting(t, "Find the degree")] is None


def test_gsm8k_returns_the_logged_response(routellm_table):
    t = routellm_table
    ducks, house = row_starting(t, DUCKS), row_starting(t, HOUSE)
    g, m = replay(t, GPT4), replay(t, MIXTRAL, price=(0.6, 0.6))
    r = asyncio.run(g.generate([t.prompts[ducks]]))[0]
    assert r.correct is True and r.text == t.responses[GPT4][ducks] and "$18" in r.text
    # ceil(chars / 4) of the prompt and of the logged response; cost at $10 / $30 per 1M
    assert r.prompt_tokens == math.ceil(len(t.prompts[ducks]) / 4)
    assert r.completion_tokens == math.ceil(len(r.text) / 4)
    assert r.cost == pytest.approx((r.prompt_tokens * 10 + r.completion_tokens * 30) / 1e6)
    r = asyncio.run(m.generate([t.prompts[house]]))[0]
    assert r.correct is False and r.text.strip().endswith("130,00")  # Mixtral's logged, cut-off answer


def test_mmlu_answers_carry_the_logged_correctness(routellm_table):
    t = routellm_table
    ok_row, bad_row = row_starting(t, FIELD_EXT), row_starting(t, S5)
    assert t.scores[ok_row].tolist() == [1.0, 1.0] and t.scores[bad_row].tolist() == [0.0, 0.0]
    g = replay(t, GPT4)
    right, wrong = asyncio.run(g.generate([t.prompts[ok_row], t.prompts[bad_row]]))
    assert (right.text, right.correct) == ("B", True)  # [Q(√2, √3, √18) : Q] = 4 = option B
    assert wrong.correct is False and wrong.text in {"A", "B", "D"}  # gold is C (24); logged wrong
    assert right.completion_tokens == 1
    again = asyncio.run(g.generate([t.prompts[bad_row]]))[0]
    assert again.text == wrong.text  # the wrong letter is deterministic


def test_correct_flag_matches_the_table_on_a_sample(routellm_table):
    t = routellm_table
    rows = np.random.default_rng(0).choice(len(t), size=300, replace=False)
    for model in (GPT4, MIXTRAL):
        rs = asyncio.run(replay(t, model).generate([t.prompts[i] for i in rows]))
        j = t.model_index(model)
        # duplicated prompts resolve to their first row: compare with that row's score
        expect = [bool(t.scores[t.index(t.prompts[i]), j] >= 0.5) for i in rows]
        assert [r.correct for r in rs] == expect and all(r.ok for r in rs)


def test_lookup_ignores_whitespace(routellm_table):
    t = routellm_table
    i = row_starting(t, FIELD_EXT)
    messy = "  " + t.prompts[i].replace("\n", "\n\n  ").replace(" ", "   ") + "\n"
    assert normalize_prompt(messy) == normalize_prompt(t.prompts[i])
    assert replay(t).lookup(messy) == i


def test_missing_prompt_error_or_penalty(routellm_table):
    t = routellm_table
    q = "What is the airspeed velocity of an unladen swallow?"
    r = asyncio.run(replay(t, on_missing="error").generate([q]))[0]
    assert not r.ok and "not in the logged table" in r.error and "unladen swallow" in r.error
    r = asyncio.run(replay(t, on_missing="penalty", penalty_text="no idea").generate([q]))[0]
    assert r.ok and r.correct is False and r.text == "no idea"
    assert (r.prompt_tokens, r.completion_tokens) == (math.ceil(len(q) / 4), 2)
    assert r.cost == pytest.approx((math.ceil(len(q) / 4) * 10 + 2 * 30) / 1e6)


def test_fuzzy_match_finds_a_reworded_query(routellm_table):
    t = routellm_table
    i = row_starting(t, DUCKS)
    reworded = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
                "muffins for her friends every day with four. She sells the rest at the farmers' market for "
                "$2 per egg. How much does she make every day?")
    assert replay(t).lookup(reworded) is None  # exact matching misses it
    b = replay(t, match="fuzzy", min_similarity=0.5)
    assert b.lookup(reworded) == i
    assert b.lookup("Who painted the Mona Lisa and when did the artist die?") is None
    stem = t.prompts[row_starting(t, FIELD_EXT)].split("\nA.")[0]  # the question without its options
    assert b.lookup(stem) == row_starting(t, FIELD_EXT)


def test_fixed_token_counts_and_text_without_answer_key(routellm_table):
    t = routellm_table
    i = row_starting(t, FIELD_EXT)
    b = replay(t, prompt_tokens=100, completion_tokens=5, answer_key=False)
    r = asyncio.run(b.generate([t.prompts[i]]))[0]
    assert (r.text, r.correct, r.prompt_tokens, r.completion_tokens) == ("[replay] correct", True, 100, 5)
    assert r.cost == pytest.approx((100 * 10 + 5 * 30) / 1e6)


def test_bad_options_name_the_field(routellm_table):
    with pytest.raises(OptionError, match="options.on_missing: expected 'error' or 'penalty'"):
        replay(routellm_table, on_missing="ignore")
    with pytest.raises(OptionError, match=r"options.model: .*not in the logged table"):
        replay(routellm_table, model="gpt-5")
    with pytest.raises(OptionError, match="options.min_similarty: unknown option"):
        replay(routellm_table, min_similarty=0.5)


def test_conf_routellm_replay_pool(shared_data):
    cfg = OmegaConf.load(ROOT / "conf" / "pool" / "routellm_replay.yaml")
    pool = CandidatePool.from_config(cfg)
    assert pool.names == ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
    g, m = pool.get("gpt-4-1106-preview"), pool.get("mixtral-8x7b-instruct")
    assert (g.price_in, g.price_out, m.price_in, m.price_out) == (10.0, 30.0, 0.6, 0.6)
    t = pool.backend("gpt-4-1106-preview").table
    ducks = t.prompts[row_starting(t, DUCKS)]
    rs = pool.route_sync([("gpt-4-1106-preview", ducks), ("mixtral-8x7b-instruct", ducks),
                          ("gpt-4-1106-preview", "an unknown question about nothing"), ("gpt-5", ducks)])
    assert [r.correct for r in rs[:3]] == [True, True, False]
    assert rs[0].cost > 10 * rs[1].cost  # same question, GPT-4 is far dearer
    assert rs[2].text.startswith("[replay] no logged answer") and "unknown model 'gpt-5'" in rs[3].error
    pool.close_sync()


def test_conf_pool_bad_source_names_the_field(tmp_path):
    cfg = OmegaConf.load(ROOT / "conf" / "pool" / "routellm_replay.yaml")
    cfg.candidates[1].options.source = str(tmp_path / "nowhere")
    with pytest.raises(PoolConfigError) as e:
        CandidatePool.from_config(cfg)
    assert e.value.field == "pool.candidates[1].options.source" and "nowhere" in str(e.value)
