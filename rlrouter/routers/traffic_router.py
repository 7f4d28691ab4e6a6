"""A router trained on logged outcomes with blanks: the Serve app's own traffic (``jobs/export_traffic.py``).

A traffic export scores only the candidates a request called: the route the app chose and, with exploration,
one more. :class:`TrafficTable` reads such tables (RouterBench's layout, a blank cell = not observed; a full
RouterBench table is the case with no blanks), with the logging policy's columns when present.

:class:`TrafficKNNRouter` (type ``traffic_knn``) predicts, per candidate, its score and cost on a prompt from
the ``k`` most similar logged prompts *on which that candidate was observed* (similar by the MiniLM embedding of
the prompt's ``question`` part, RouterBench's ``last_block`` rule by default), shrunk towards the candidate's
mean with ``prior`` pseudo-observations, and routes to the candidate of highest predicted reward

    reward = score - cost_weight x cost in thousandths of a dollar

(RouterBench's price weight, ``eval.price_weights``). A candidate's mean is itself shrunk towards the mean of
every observation with ``prior`` pseudo-observations; a candidate never observed gets that overall mean and the
dearest mean cost, so it is tried only where nothing observed looks good. With ``pessimism: z`` the score is the
lower bound ``mean - z x sqrt(mean (1 - mean) / (neighbours + prior))``: a candidate seen on few prompts must
look better by more before it is chosen (pessimism against the winner's curse of learning from few logged
outcomes, as in offline bandit learning).

The same reward scores every logged cell (:func:`cell_rewards`), so the canary of a release
(``rlrouter.serving.release``) and the off-policy estimate before it (:func:`off_policy`) measure one thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rlrouter.data.routerbench import question_text
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, register_router

Embed = Callable[[list[str]], np.ndarray]
COST_UNIT = 1000.0  # reward's cost in thousandths of a dollar


def reward_of(score: Any, cost_usd: Any, cost_weight: float) -> Any:
    """``score - cost_weight x 1000 x cost_usd`` (arrays or floats; a blank stays blank)."""
    return score - cost_weight * COST_UNIT * cost_usd


@dataclass
class TrafficTable:
    """Logged outcomes, one row a request, NaN where a candidate was not observed."""

    names: list[str]
    prompts: list[str | None]
    embeddings: list[Sequence[float] | None]  # a row's stored embedding, where its prompt text was not kept
    scores: np.ndarray  # (N, M), NaN: not observed
    costs: np.ndarray  # (N, M), NaN: not called
    logged: np.ndarray  # (N,) the route the logging policy chose, -1 when unknown (a full table)
    propensity: np.ndarray  # (N,) its probability, NaN when unknown
    explored: np.ndarray  # (N,) the candidate exploration added, -1 for none
    explored_propensity: np.ndarray  # (N,)

    def __len__(self) -> int:
        return len(self.prompts)

    @classmethod
    def concat(cls, tables: Sequence[TrafficTable]) -> TrafficTable:
        names = list(dict.fromkeys(n for t in tables for n in t.names))

        def widen(t: TrafficTable, a: np.ndarray) -> np.ndarray:
            out = np.full((len(t), len(names)), np.nan)
            out[:, [names.index(n) for n in t.names]] = a
            return out

        def remap(t: TrafficTable, a: np.ndarray) -> np.ndarray:
            return np.array([names.index(t.names[i]) if i >= 0 else -1 for i in a], dtype=np.int64)

        return cls(names, [p for t in tables for p in t.prompts], [e for t in tables for e in t.embeddings],
                   np.concatenate([widen(t, t.scores) for t in tables]), np.concatenate([widen(t, t.costs) for t in tables]),
                   np.concatenate([remap(t, t.logged) for t in tables]), np.concatenate([t.propensity for t in tables]),
                   np.concatenate([remap(t, t.explored) for t in tables]),
                   np.concatenate([t.explored_propensity for t in tables]))

    @classmethod
    def empty(cls, names: Sequence[str]) -> TrafficTable:
        m, none = len(names), np.zeros(0, dtype=np.int64)
        return cls(list(names), [], [], np.zeros((0, m)), np.zeros((0, m)), none, np.zeros(0), none, np.zeros(0))

    @classmethod
    def from_eval_set(cls, es: EvalSet) -> TrafficTable:
        """A full table (every candidate observed on every prompt), e.g. RouterBench's own logs."""
        n = len(es)
        return cls(list(es.names), list(es.prompts), [None] * n, es.scores.copy(), es.costs.copy(),
                   np.full(n, -1), np.full(n, np.nan), np.full(n, -1), np.full(n, np.nan))

    def rows(self, idx: Sequence[int] | np.ndarray) -> TrafficTable:
        idx = np.asarray(idx, dtype=np.int64)
        return TrafficTable(self.names, [self.prompts[i] for i in idx], [self.embeddings[i] for i in idx],
                           self.scores[idx], self.costs[idx], self.logged[idx], self.propensity[idx],
                           self.explored[idx], self.explored_propensity[idx])

    def embed(self, embed: Embed) -> np.ndarray:
        """(N, D) unit vectors: the prompts' embeddings, or the stored ones where no text was kept."""
        text_rows = [i for i, p in enumerate(self.prompts) if p is not None]
        vecs: list[np.ndarray | None] = [None] * len(self)
        if text_rows:
            for i, v in zip(text_rows, np.asarray(embed([self.prompts[i] for i in text_rows]), dtype=np.float32)):
                vecs[i] = v
        for i, e in enumerate(self.embeddings):
            if vecs[i] is None:
                if e is None:
                    raise ValueError(f"logged table row {i}: neither a prompt nor an embedding")
                vecs[i] = np.asarray(e, dtype=np.float32)
        out = np.stack(vecs)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def _cell(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x


def read_logged_table(path: str | Path, candidates: Sequence[str] | None = None) -> TrafficTable:
    """A table in RouterBench's layout (CSV or parquet) with blanks allowed: a traffic export, or a full
    RouterBench table. Candidates are the ``<model>`` columns with a ``<model>|total_cost`` twin. Errors name
    the file, the row and the column."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    names = [c[: -len("|total_cost")] for c in df.columns if c.endswith("|total_cost")]
    if candidates is not None:
        missing = [c for c in candidates if c not in names]
        if missing:
            raise ValueError(f"{path}: candidates {missing} have no '<model>|total_cost' column (found {names})")
        names = list(candidates)
    if len(names) < 2:
        raise ValueError(f"{path}: routing needs >= 2 candidates ('<model>' and '<model>|total_cost' columns), "
                         f"found {names}")
    if "prompt" not in df.columns and "embedding" not in df.columns:
        raise ValueError(f"{path}: a column 'prompt' (or, for a log kept without prompts, 'embedding') is needed")
    n = len(df)
    scores, costs = np.full((n, len(names)), np.nan), np.full((n, len(names)), np.nan)
    for j, m in enumerate(names):
        if m not in df.columns:
            raise ValueError(f"{path}: column '{m}' (its scores) missing beside '{m}|total_cost'")
        scores[:, j] = [_cell(v) for v in df[m]]
        costs[:, j] = [_cell(v) for v in df[f"{m}|total_cost"]]
    bad = np.argwhere(~np.isnan(scores) & ((scores < 0) | (scores > 1)))
    if len(bad):
        i, j = bad[0]
        raise ValueError(f"{path}: row {i + 1}, column '{names[j]}': a score in [0, 1], got {scores[i, j]}")
    bad = np.argwhere(~np.isnan(costs) & (costs < 0))
    if len(bad):
        i, j = bad[0]
        raise ValueError(f"{path}: row {i + 1}, column '{names[j]}|total_cost': a cost >= 0, got {costs[i, j]}")
    # a called candidate with no logged cost (a live backend that reports none) costs nothing it knows of
    costs[~np.isnan(scores) & np.isnan(costs)] = 0.0

    def col(name: str) -> list[Any]:
        return list(df[name]) if name in df.columns else [None] * n

    def index(values: list[Any], what: str) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        for i, v in enumerate(values):
            if isinstance(v, str) and v:
                if v not in names:
                    raise ValueError(f"{path}: row {i + 1}, column '{what}': '{v}' is not a candidate ({names})")
                out[i] = names.index(v)
        return out

    prompts = [p if isinstance(p, str) and p else None for p in col("prompt")]
    embeddings = [None if e is None or (isinstance(e, float) and math.isnan(e)) else list(e) for e in col("embedding")]
    return TrafficTable(names, prompts, embeddings, scores, costs, index(col("logged_model"), "logged_model"),
                       np.array([_cell(v) for v in col("logged_propensity")]),
                       index(col("explored_model"), "explored_model"),
                       np.array([_cell(v) for v in col("explored_propensity")]))


def cell_rewards(table: TrafficTable, cost_weight: float) -> np.ndarray:
    """(N, M) reward of each observed cell, NaN elsewhere."""
    return reward_of(table.scores, table.costs, cost_weight)


class TrafficKNNRouter(Router):
    """Per candidate, the mean score and cost on the ``k`` nearest logged prompts where it was observed."""

    def __init__(self, name: str, candidates: Sequence[str], embed: Embed, k: int = 20, cost_weight: float = 0.1,
                 prior: float = 1.0, pessimism: float = 0.0, question: str = "last_block"):
        if k < 1:
            raise ValueError(f"traffic_knn.k: must be >= 1, got {k}")
        if cost_weight < 0:
            raise ValueError(f"traffic_knn.cost_weight: must be >= 0, got {cost_weight}")
        if prior < 0:
            raise ValueError(f"traffic_knn.prior: pseudo-observations >= 0, got {prior}")
        if pessimism < 0:
            raise ValueError(f"traffic_knn.pessimism: a number of standard errors >= 0, got {pessimism}")
        question_text("", question)  # checks the rule
        self.name, self.names, self.question = name, list(candidates), question
        self.embed: Embed = lambda prompts: embed([question_text(p, question) for p in prompts])
        self.k, self.cost_weight, self.prior, self.pessimism = int(k), float(cost_weight), float(prior), float(pessimism)
        self.keys: np.ndarray | None = None
        self.scores: np.ndarray | None = None
        self.costs: np.ndarray | None = None

    def fit(self, train: EvalSet) -> None:
        self.fit_logged(TrafficTable.from_eval_set(train))

    def fit_logged(self, table: TrafficTable) -> None:
        if table.names != self.names:  # the same candidates in another order, or some never observed
            table = TrafficTable.concat([TrafficTable.empty(self.names), table])
            if table.names != self.names:
                raise ValueError(f"traffic_knn: the table's candidates {table.names} are not the router's {self.names}")
        self._set(table.embed(self.embed), table.scores.copy(), table.costs.copy())

    def _set(self, keys: np.ndarray, scores: np.ndarray, costs: np.ndarray) -> None:
        """The fitted state, and what every prediction reads of it: each candidate's observed rows, its mean
        score (shrunk towards the overall mean) and the fallbacks of a candidate never observed."""
        self.keys, self.scores, self.costs = keys, scores, costs
        seen = ~np.isnan(scores)
        self._overall = float(np.nanmean(scores)) if seen.any() else 0.5
        self._rows = [np.flatnonzero(seen[:, j]) for j in range(len(self.names))]
        self._mean = [float((scores[r, j].sum() + self.prior * self._overall) / (len(r) + self.prior))
                      for j, r in enumerate(self._rows)]
        mean_cost = [float(costs[r, j].mean()) for j, r in enumerate(self._rows) if len(r)]
        self._dearest = max(mean_cost) if mean_cost else 0.0

    def predict_embedded(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(score, cost) predictions (N, M) for unit-vector queries ``q`` (N, D)."""
        if self.keys is None or self.scores is None or self.costs is None:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        n, m = len(q), len(self.names)
        sims = q @ self.keys.T if len(self.keys) else np.zeros((n, 0))
        s_hat, c_hat = np.empty((n, m)), np.empty((n, m))
        for j, rows in enumerate(self._rows):
            if len(rows) == 0:
                s_hat[:, j], c_hat[:, j] = self._overall, self._dearest
                continue
            mean_j = self._mean[j]
            k = min(self.k, len(rows))
            top = rows[np.argpartition(-sims[:, rows], k - 1, axis=1)[:, :k]]  # (N, k)
            s = (self.scores[top, j].sum(axis=1) + self.prior * mean_j) / (k + self.prior)
            if self.pessimism:
                s = s - self.pessimism * np.sqrt(np.clip(s * (1 - s), 0.0, None) / (k + self.prior))
            s_hat[:, j] = s
            c_hat[:, j] = self.costs[top, j].mean(axis=1)
        return s_hat, c_hat

    def reward_hat(self, q: np.ndarray) -> np.ndarray:
        s, c = self.predict_embedded(q)
        return reward_of(s, c, self.cost_weight)

    def _unit(self, prompts: list[str]) -> np.ndarray:
        v = np.asarray(self.embed(list(prompts)), dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    def decide(self, prompts: list[str]) -> np.ndarray:
        return self.reward_hat(self._unit(prompts)).argmax(axis=1)

    def save_state(self, folder: Path) -> dict[str, Any]:
        if self.keys is None:
            raise ValueError(f"{self.name}: fit() before saving")
        np.savez(folder / "traffic_knn.npz", keys=self.keys, scores=self.scores, costs=self.costs)
        return {"rows": int(len(self.keys)), "observed": int((~np.isnan(self.scores)).sum())}

    def load_state(self, folder: Path, state: dict[str, Any]) -> None:
        with np.load(folder / "traffic_knn.npz") as z:
            self._set(z["keys"], z["scores"], z["costs"])


@register_router("traffic_knn")
def _traffic_knn(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    return TrafficKNNRouter("traffic_knn", ctx.candidates, ctx.embed, **cfg)
