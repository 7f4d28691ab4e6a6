"""End to end on real data: Router-R1 trajectories built from RouteLLM's logged GSM8K answers of GPT-4
and Mixtral, scored by a reward built from config, checked against the logged grading.

The policy's trajectory routes the question to one candidate, the candidate's real logged response is
the ``<information>``, and the policy answers with the last number of that response.
"""

from __future__ import annotations

import csv
import re

import pytest

from rlrouter.data.formats import RouterR1Record
from rlrouter.data.io import read_jsonl
from rlrouter.rewards import build_reward

# USD per 1M output tokens at the time of RouteLLM's logs (OpenAI gpt-4-1106-preview list price;
# Mixtral-8x7B at Together AI). Whitespace words stand in for tokens: only ratios matter after scaling.
CANDIDATES = {
    "gpt-4-1106-preview": ("gpt-4-1106-preview", 30.0),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b", 0.6),
}


def _trajectories(shared_data, n_questions: int):
    root = shared_data / "routellm" / "gsm8k"
    gold = {}
    for _, row in read_jsonl(root / "test.jsonl"):
        gold[row["question"].strip()] = row["answer"].split("####")[-1].strip().replace(",", "")
    with open(root / "gsm8k_responses.csv", newline="") as f:
        rows = [r for _, r in zip(range(n_questions), csv.DictReader(f))]
    samples = []
    for row in rows:
        record = RouterR1Record.from_dict({
            "query": row["prompt"], "query_type": "gsm8k", "ground_truth": [gold[row["prompt"].strip()]],
            "candidate_models": [{"name": name, "cost": price, "latency": 0.0} for name, price in CANDIDATES.values()],
        })
        for column, (name, _) in CANDIDATES.items():
            response = row[f"{column}_response"]
            numbers = re.findall(r"-?\d[\d,]*\.?\d*", response)
            answer = numbers[-1].replace(",", "").rstrip(".") if numbers else "none"
            text = (f"<think>This needs arithmetic; ask {name}.</think>\n"
                    f"<search> {name}: {record.query} </search>\n"
                    f"<information>{response}</information>\n"
                    f"<think>The response ends with the result.</think>\n<answer> {answer} </answer>")
            samples.append({"record": record, "model": name, "text": text, "logged": row[column] == "True",
                            "tokens": len(response.split())})
    return samples


def test_router_r1_reward_on_logged_gsm8k_responses(shared_data):
    samples = _trajectories(shared_data, n_questions=60)
    prices = {name: price for name, price in CANDIDATES.values()}
    reward = build_reward({"name": "combined", "functions": [
        {"name": "router_r1", "alpha": 0.5, "candidates": list(prices), "prices": prices, "cost_window": 64,
         "weight": 1.0},
        {"name": "tool_budget", "budget_B": 1.0, "cost_weights": {"gpt-4-1106-preview": 2.0}, "weight": 0.1},
    ]})
    router_r1, budget = reward.functions
    scores, totals = [], []
    for start in range(0, len(samples), 20):  # batches of 20: the cost window slides across them
        batch = samples[start:start + 20]
        out = reward([s["record"].query for s in batch], [s["text"] for s in batch],
                     ground_truth=[s["record"].ground_truth for s in batch],
                     candidate_models=[s["record"].candidate_models for s in batch],
                     route_tokens=[[s["tokens"]] for s in batch])
        scores += router_r1.last_scores
        totals += out
        assert set(reward.last_metrics) >= {"reward/format", "reward/outcome", "reward/cost", "reward/total",
                                            "reward/router_r1", "reward/tool_budget"}
    assert all(s.format == 0.0 for s in scores), [s.failure for s in scores if s.failure]
    agree = sum((s.outcome == 1.0) == smp["logged"] for s, smp in zip(scores, samples)) / len(samples)
    assert agree >= 0.95, agree  # 0.995 measured on the first 200 questions
    for s, smp, total in zip(scores, samples, totals):
        correct_score = (1 + s.format) * 0.5 + 0.5 * s.cost
        expected = correct_score if s.outcome == 1.0 else s.format
        budget_r = 0.0 if smp["model"] == "gpt-4-1106-preview" else 1.0  # C = 2 -> 1 - 1/1 = 0
        assert total == pytest.approx(expected + 0.1 * budget_r)
    mean_cost = {m: sum(s.cost for s, smp in zip(scores, samples) if smp["model"] == m) / 60
                 for m in ("gpt-4-1106-preview", "mixtral-8x7b")}
    assert mean_cost["mixtral-8x7b"] > 0.9 and mean_cost["gpt-4-1106-preview"] < 0.5
    # same question, same batch: the 50x cheaper candidate never earns less cost reward
    pairs = list(zip(scores[0::2], scores[1::2]))
    assert all(mix.cost >= gpt.cost for gpt, mix in pairs)
    assert len(router_r1.cost_reward.window) == 64
