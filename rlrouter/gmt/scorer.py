"""Serving-side GMTRouter: load a checkpoint, score candidates for (user, query), add users few-shot.

The Serve app wraps this plain object (no Ray imports here). Node embeddings of the whole served
graph are computed once at load and again only when ``add_user`` changes the graph; a query is
embedded with MiniLM (cached by text hash) and, when it was never seen, encoded as an isolated query
node, which is exactly what the full graph would compute for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from rlrouter.data.formats import GMTRecord, Interaction
from rlrouter.gmt.graph import EmbedFn, GMTGraph, default_embed, interactions_from_dicts, text_key
from rlrouter.gmt.model import GMTRouterModel, cold_user_embedding, isolated_query_embedding
from rlrouter.gmt.train import load_checkpoint


class UnknownUserError(KeyError):
    """The user has no node in the served graph; ``add_user`` it first."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class GMTRouterScorer:
    """``score(user_id, query) -> {candidate: logit}``; higher means the user is predicted to prefer it."""

    def __init__(self, model: GMTRouterModel, graph: GMTGraph, config: dict | None = None,
                 embed: EmbedFn | None = None):
        self.model = model.eval()
        self.graph = graph
        self.config = config or {}
        self._embed: Callable[[list[str]], np.ndarray] = embed or default_embed
        self._lock = threading.Lock()
        self._query_cache: dict[str, torch.Tensor] = {}
        self._refresh()

    @classmethod
    def load(cls, checkpoint_dir: str | Path, embed: EmbedFn | None = None) -> "GMTRouterScorer":
        model, graph, cfg = load_checkpoint(checkpoint_dir)
        return cls(model, graph, cfg, embed=embed)

    @property
    def llms(self) -> list[str]:
        return list(self.graph.llms)

    @property
    def users(self) -> list[str]:
        return list(self.graph.users)

    @torch.no_grad()
    def _refresh(self) -> None:
        self._h = self.model.encode(self.graph.x_dict(), self.graph.edge_index_dict())
        self._query_cache.clear()

    @torch.no_grad()
    def _query_h(self, query: str) -> torch.Tensor:
        key = text_key(query)
        q = self.graph.query_index(key)
        if q is not None:
            return self._h["query"][q]
        if key not in self._query_cache:
            x = torch.from_numpy(np.asarray(self._embed([query]), dtype=np.float32))  # (1, E)
            self._query_cache[key] = isolated_query_embedding(self.model, x)[0]
        return self._query_cache[key]

    @torch.no_grad()
    def score(self, user_id: str, query: str) -> dict[str, float]:
        """Logit per candidate for this user and query."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: expected a non-empty string")
        with self._lock:
            u = self.graph.user_index(str(user_id))
            if u is None:
                raise UnknownUserError(f"user_id '{user_id}' is not in the GMTRouter graph "
                                       f"({len(self.graph.users)} users); add it with add_user()")
            qh = self._query_h(query)
            h = dict(self._h)
            h["query"] = qh.unsqueeze(0)
            llms = torch.arange(len(self.graph.llms)).unsqueeze(0)  # (1, L)
            s = self.model.score(h, torch.tensor([u]), torch.tensor([0]), llms)[0]
        return {m: float(v) for m, v in zip(self.graph.llms, s.tolist())}

    @torch.no_grad()
    def score_batch(self, queries: Sequence[str], user_id: str | None = None,
                    query_x: np.ndarray | None = None, graph_queries: bool = True) -> np.ndarray:
        """(N, L) logits, columns in ``llms`` order, for many queries of one user.

        ``user_id=None`` scores for a user with no history (``cold_user_embedding``): the same for
        every unknown user. ``query_x`` (N, E) are the queries' text embeddings when the caller has
        them already. ``graph_queries=False`` encodes every query as a new, isolated node even when the
        served graph holds it, so ratings logged on that query never reach its score (evaluation on
        questions the training logs may contain).
        """
        queries = list(queries)
        if not queries:
            return np.zeros((0, len(self.graph.llms)), dtype=np.float32)
        with self._lock:
            if user_id is None:
                u = cold_user_embedding(self.model)
            else:
                ui = self.graph.user_index(str(user_id))
                if ui is None:
                    raise UnknownUserError(f"user_id '{user_id}' is not in the GMTRouter graph "
                                           f"({len(self.graph.users)} users); add it with add_user()")
                u = self._h["user"][ui]
            rows = [self.graph.query_index(q) if graph_queries else None for q in queries]
            new = [i for i, r in enumerate(rows) if r is None]
            qh = torch.empty(len(queries), u.shape[0])
            if new:
                if query_x is None:
                    x = np.asarray(self._embed([queries[i] for i in new]), dtype=np.float32)
                else:
                    x = np.asarray(query_x, dtype=np.float32)[new]
                qh[new] = isolated_query_embedding(self.model, torch.from_numpy(x))
            old = [i for i, r in enumerate(rows) if r is not None]
            if old:
                qh[old] = self._h["query"][torch.tensor([rows[i] for i in old])]
            n, llm_h = len(queries), self._h["llm"]
            s = self.model.predictor(u.expand(n, -1), qh, llm_h.unsqueeze(0).expand(n, -1, -1))  # (N, L)
        return s.numpy()

    def route(self, user_id: str, query: str, candidates: Sequence[str] | None = None) -> str:
        """The best-scored candidate (among ``candidates`` when given)."""
        scores = self.score(user_id, query)
        pool = list(candidates) if candidates else list(scores)
        missing = [c for c in pool if c not in scores]
        if missing:
            raise KeyError(f"candidates {missing} are not GMTRouter llm nodes {list(scores)}")
        return max(pool, key=lambda c: scores[c])

    def add_user(self, user_id: str, interactions: Sequence[Interaction | dict]) -> int:
        """Add (or extend) a user from ``interactions`` without retraining; returns how many were added.

        Each interaction's ``model_used`` must be a known candidate; the error names the field.
        """
        items = interactions_from_dicts(interactions, str(user_id))
        if not items:
            raise ValueError("interactions: expected at least one interaction")
        rec = GMTRecord(user_id=str(user_id), interactions=items)
        with self._lock:
            new = self.graph.extend([rec], embed=self._embed)
            self._refresh()
        return int(new.numel())
