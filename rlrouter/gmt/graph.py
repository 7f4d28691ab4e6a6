"""The GMTRouter interaction graph: GMTRecord logs -> a torch-geometric ``HeteroData``.

Nodes (GMTRouter paper, Sec. 3):

- ``user``: one per user_id; features start at zero, so a user is known only through its sessions
  (that is what lets a new user be added later without retraining).
- ``session``: one per interaction, i.e. per (turn, candidate that answered). GMTRouter keeps one
  session node per answered turn so that each session carries exactly one query, one candidate and
  one response, and a rating is never detached from the candidate it rates. Zero features.
- ``query``: one per distinct query text (shared by every user who asked it), MiniLM features.
- ``response``: one per interaction, carrying the user's feedback scaled to [0, 1] and that
  feedback times the answering candidate's embedding (see ``GMTGraph.response_x``).
- ``llm``: one per candidate, MiniLM features of a text description of the candidate.

Edges: session->user, query->session, llm->session, response->session, session->previous session (the
same candidate's session on the previous turn of the conversation, else the previous turn's first),
and the reverse of each, which message passing needs for the llm and query nodes to learn anything.

A ``GMTGraph`` holds every interaction; ``hetero(visible)`` builds the ``HeteroData`` whose edges come
only from the ``visible`` interactions. Training hides target turns this way, and evaluation hides
held-out turns, so no rating ever leaks into the prediction of itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.data import HeteroData

from rlrouter.data.formats import FEEDBACK_RANGE, GMTRecord, Interaction, RecordError

NODE_TYPES = ("user", "session", "query", "response", "llm")

# (src, relation, dst). The first five are GMTRouter's edges (module docstring); the rest are their reverses.
EDGE_TYPES: tuple[tuple[str, str, str], ...] = (
    ("session", "belongs_to", "user"),
    ("query", "asked_in", "session"),
    ("llm", "answers_in", "session"),
    ("response", "rates", "session"),
    ("session", "follows", "session"),  # session -> its previous session
    ("user", "owns", "session"),
    ("session", "asks", "query"),
    ("session", "calls", "llm"),
    ("session", "rated_by", "response"),
    ("session", "precedes", "session"),  # previous session -> next session
)

# Descriptions embedded as the llm nodes' features. Keys are the names RouteLLM's logs use.
DEFAULT_LLM_DESCRIPTIONS: dict[str, str] = {
    "gpt-4-1106-preview": (
        "GPT-4 Turbo (gpt-4-1106-preview) by OpenAI: a large proprietary frontier model, strong at "
        "reasoning, mathematics and knowledge questions; expensive, about $10 per million input tokens "
        "and $30 per million output tokens."),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": (
        "Mixtral 8x7B Instruct by Mistral AI: an open-weight sparse mixture-of-experts model with "
        "about 13B active parameters; good general knowledge, weaker multi-step math; cheap, about "
        "$0.60 per million tokens."),
}

EmbedFn = Callable[[list[str]], np.ndarray]


class GraphError(ValueError):
    """Records that are each valid but do not make a consistent graph. Names record and field."""

    def __init__(self, record: int | str, field_path: str, message: str):
        self.record = record
        self.field = field_path
        self.message = message
        super().__init__(f"record {record}: field '{field_path}': {message}")


def text_key(text: str) -> str:
    """The identity of a query text: sha1 of its whitespace-normalised form."""
    return hashlib.sha1(" ".join(text.split()).encode("utf-8")).hexdigest()


def default_embed(texts: list[str]) -> np.ndarray:
    """MiniLM sentence embeddings, cached on disk by text hash (``rlrouter.embeddings``)."""
    from rlrouter.embeddings import embed_texts

    return embed_texts(list(texts), model="minilm-l6")


def describe_llm(name: str, descriptions: dict[str, str] | None = None) -> str:
    """The text an llm node embeds: a given description, a known one, or the bare name."""
    if descriptions and name in descriptions:
        return descriptions[name]
    return DEFAULT_LLM_DESCRIPTIONS.get(name, f"Large language model {name}.")


def normalize_feedback(fb: torch.Tensor | float) -> torch.Tensor:
    """Feedback in ``FEEDBACK_RANGE`` -> [0, 1], the response node's feature."""
    lo, hi = FEEDBACK_RANGE
    return (torch.as_tensor(fb, dtype=torch.float32) - lo) / (hi - lo)


@dataclass
class GMTGraph:
    """Every interaction of a log set, as flat arrays, plus node features.

    Interaction ``i`` is session node ``i`` and response node ``i``. ``turn[i]`` groups the
    interactions that answered the same query in the same conversation turn: those are the
    responses a user compared, the unit of the pairwise / cross-entropy loss.
    """

    users: list[str]
    llms: list[str]
    llm_descriptions: list[str]
    query_keys: list[str]
    query_x: torch.Tensor  # (Q, E) float32
    llm_x: torch.Tensor  # (L, E) float32
    user: torch.Tensor  # (N,) long
    query: torch.Tensor  # (N,) long
    llm: torch.Tensor  # (N,) long
    feedback: torch.Tensor  # (N,) float32, raw feedback in FEEDBACK_RANGE
    turn: torch.Tensor  # (N,) long, comparison group id
    prev: torch.Tensor  # (N,) long, previous session (interaction) or -1
    unit: torch.Tensor  # (N,) long, split unit id (a conversation, or a turn without session_id)
    timestamp: torch.Tensor  # (N,) float64
    _user_index: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _query_index: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        n = int(self.user.numel())
        for name in ("query", "llm", "feedback", "turn", "prev", "unit", "timestamp"):
            t = getattr(self, name)
            if t.shape != (n,):
                raise ValueError(f"{name}: shape {tuple(t.shape)} != ({n},)")
        if self.query_x.shape[0] != len(self.query_keys):
            raise ValueError(f"query_x: {self.query_x.shape[0]} rows for {len(self.query_keys)} query_keys")
        if self.llm_x.shape[0] != len(self.llms) or len(self.llm_descriptions) != len(self.llms):
            raise ValueError(f"llm_x / llm_descriptions: need one row per llm ({len(self.llms)})")
        if n and (int(self.llm.max()) >= len(self.llms) or int(self.query.max()) >= len(self.query_keys)
                  or int(self.user.max()) >= len(self.users)):
            raise ValueError("interaction arrays index past the node lists")
        self._user_index = {u: i for i, u in enumerate(self.users)}
        self._query_index = {k: i for i, k in enumerate(self.query_keys)}

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def num_interactions(self) -> int:
        return int(self.user.numel())

    @property
    def embed_dim(self) -> int:
        return int(self.query_x.shape[1])

    @property
    def multi_turn(self) -> bool:
        """True when some conversation has more than one turn (the paper then uses 3 HGT layers)."""
        return bool((self.prev >= 0).any())

    def user_index(self, user_id: str) -> int | None:
        return self._user_index.get(str(user_id))

    def query_index(self, text_or_key: str) -> int | None:
        key = text_or_key if len(text_or_key) == 40 and text_or_key in self._query_index else text_key(text_or_key)
        return self._query_index.get(key)

    def counts(self) -> dict[str, int]:
        n = self.num_interactions
        return {"user": len(self.users), "session": n, "query": len(self.query_keys), "response": n,
                "llm": len(self.llms)}

    # ------------------------------------------------------------------ message-passing graph
    def x_dict(self) -> dict[str, torch.Tensor]:
        """Initial node features. User and session nodes start at zero, as in the paper: they are known only through their edges."""
        n = self.num_interactions
        return {
            "user": torch.zeros(len(self.users), 1),
            "session": torch.zeros(n, 1),
            "query": self.query_x,
            "response": self.response_x(),  # (N, 1 + E)
            "llm": self.llm_x,
        }

    def response_x(self) -> torch.Tensor:
        """Response features: [f, (f - 1/2) * e_llm], f the feedback scaled to [0, 1].

        The product binds the rating to the candidate that earned it. HGT sums (attention-weighted)
        messages, so with the bare rating a session would hold "some candidate, some rating" and a
        user's history would average to "rates things 3.4 on average": which candidate the user likes
        would be lost. Summed over a user's sessions, the product term is the user's rating
        direction per candidate, the statistic a per-user posterior keeps.
        """
        f = normalize_feedback(self.feedback).unsqueeze(-1)  # (N, 1)
        return torch.cat([f, (f - 0.5) * self.llm_x[self.llm]], dim=-1)  # (N, 1 + E)

    def edge_index_dict(self, visible: torch.Tensor | None = None) -> dict[tuple[str, str, str], torch.Tensor]:
        """Edges of the visible interactions (all when ``visible`` is None). Every type is present,
        possibly with zero edges, so the model sees the same edge types at every step."""
        n = self.num_interactions
        vis = torch.ones(n, dtype=torch.bool) if visible is None else visible.to(torch.bool)
        if vis.shape != (n,):
            raise ValueError(f"visible: shape {tuple(vis.shape)} != ({n},)")
        s = torch.nonzero(vis, as_tuple=True)[0]  # (V,) visible session ids
        has_prev = self.prev[s] >= 0
        cur = s[has_prev]
        prv = self.prev[cur]
        keep = vis[prv]
        cur, prv = cur[keep], prv[keep]
        e: dict[tuple[str, str, str], torch.Tensor] = {
            ("session", "belongs_to", "user"): torch.stack([s, self.user[s]]),
            ("query", "asked_in", "session"): torch.stack([self.query[s], s]),
            ("llm", "answers_in", "session"): torch.stack([self.llm[s], s]),
            ("response", "rates", "session"): torch.stack([s, s]),
            ("session", "follows", "session"): torch.stack([cur, prv]),
        }
        for (src, _, dst), rev in zip(EDGE_TYPES[:5], EDGE_TYPES[5:]):
            fwd = e[(src, _, dst)]
            e[rev] = fwd.flip(0)
        return {k: e[k].contiguous() for k in EDGE_TYPES}

    def hetero(self, visible: torch.Tensor | None = None) -> HeteroData:
        """The ``HeteroData`` with all nodes and the visible interactions' edges."""
        data = HeteroData()
        for t, x in self.x_dict().items():
            data[t].x = x
        for et, ei in self.edge_index_dict(visible).items():
            data[et].edge_index = ei
        return data

    @staticmethod
    def metadata() -> tuple[list[str], list[tuple[str, str, str]]]:
        return list(NODE_TYPES), list(EDGE_TYPES)

    # ------------------------------------------------------------------ comparison groups
    def groups(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Comparison groups among the masked interactions: (G, K) interaction ids, -1 padded.

        A group is a turn in which the user rated at least two different candidates. Groups whose
        ratings are all equal carry no preference and are dropped.
        """
        n = self.num_interactions
        m = torch.ones(n, dtype=torch.bool) if mask is None else mask.to(torch.bool)
        ids = torch.nonzero(m, as_tuple=True)[0]
        if ids.numel() == 0:
            return torch.empty(0, 2, dtype=torch.long)
        order = torch.argsort(self.turn[ids], stable=True)
        ids = ids[order]
        turns = self.turn[ids]
        uniq, counts = torch.unique_consecutive(turns, return_counts=True)
        rows: list[list[int]] = []
        start = 0
        for c in counts.tolist():
            members = ids[start:start + c].tolist()
            start += c
            if c < 2:
                continue
            fb = self.feedback[members]
            if bool((fb == fb[0]).all()):
                continue
            rows.append(members)
        if not rows:
            return torch.empty(0, 2, dtype=torch.long)
        k = max(len(r) for r in rows)
        out = torch.full((len(rows), k), -1, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, :len(r)] = torch.tensor(r)
        return out

    def singles(self, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Every masked interaction as its own group: (N, 1) ids, the unit of the pointwise loss
        (logs with one model per query, where no turn compares two candidates)."""
        n = self.num_interactions
        m = torch.ones(n, dtype=torch.bool) if mask is None else mask.to(torch.bool)
        return torch.nonzero(m, as_tuple=True)[0].unsqueeze(1)

    # ------------------------------------------------------------------ growth (few-shot users)
    def extend(self, records: Sequence[GMTRecord], embed: EmbedFn | None = None,
               record_offset: int = 0) -> torch.Tensor:
        """Append records (new users, or more turns of known users) in place; return the new
        interaction ids. Queries already in the graph reuse their node; new ones are embedded."""
        other = build_graph(records, llms=self.llms, llm_descriptions=dict(zip(self.llms, self.llm_descriptions)),
                            embed=embed, llm_x=self.llm_x, known_queries=self._query_index,
                            record_offset=record_offset)
        n0 = self.num_interactions
        u_map = []
        for u in other.users:
            if u not in self._user_index:
                self._user_index[u] = len(self.users)
                self.users.append(u)
            u_map.append(self._user_index[u])
        q_map = []
        new_rows = []
        for j, k in enumerate(other.query_keys):
            if k not in self._query_index:
                self._query_index[k] = len(self.query_keys)
                self.query_keys.append(k)
                new_rows.append(other.query_x[j])
            q_map.append(self._query_index[k])
        if new_rows:
            self.query_x = torch.cat([self.query_x, torch.stack(new_rows)])
        u_map_t = torch.tensor(u_map, dtype=torch.long)
        q_map_t = torch.tensor(q_map, dtype=torch.long)
        turn_base = int(self.turn.max()) + 1 if n0 else 0
        unit_base = int(self.unit.max()) + 1 if n0 else 0
        prev = torch.where(other.prev >= 0, other.prev + n0, other.prev)
        self.user = torch.cat([self.user, u_map_t[other.user]])
        self.query = torch.cat([self.query, q_map_t[other.query]])
        self.llm = torch.cat([self.llm, other.llm])
        self.feedback = torch.cat([self.feedback, other.feedback])
        self.turn = torch.cat([self.turn, other.turn + turn_base])
        self.prev = torch.cat([self.prev, prev])
        self.unit = torch.cat([self.unit, other.unit + unit_base])
        self.timestamp = torch.cat([self.timestamp, other.timestamp])
        return torch.arange(n0, self.num_interactions)

    # ------------------------------------------------------------------ persistence
    def to_tensors(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(tensors for safetensors, JSON-able metadata)."""
        tensors = {"query_x": self.query_x.contiguous(), "llm_x": self.llm_x.contiguous(),
                   "user": self.user, "query": self.query, "llm": self.llm, "feedback": self.feedback,
                   "turn": self.turn, "prev": self.prev, "unit": self.unit, "timestamp": self.timestamp}
        meta = {"users": list(self.users), "llms": list(self.llms),
                "llm_descriptions": list(self.llm_descriptions), "query_keys": list(self.query_keys)}
        return tensors, meta

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], meta: dict) -> "GMTGraph":
        return cls(users=list(meta["users"]), llms=list(meta["llms"]),
                   llm_descriptions=list(meta["llm_descriptions"]), query_keys=list(meta["query_keys"]),
                   **{k: tensors[k] for k in ("query_x", "llm_x", "user", "query", "llm", "feedback", "turn",
                                              "prev", "unit", "timestamp")})


def build_graph(records: Sequence[GMTRecord], llms: Sequence[str] | None = None,
                llm_descriptions: dict[str, str] | None = None, embed: EmbedFn | None = None,
                llm_x: torch.Tensor | None = None, known_queries: dict[str, int] | None = None,
                record_offset: int = 0) -> GMTGraph:
    """Build the graph of ``records``.

    ``llms`` fixes the candidate list (a ``model_used`` outside it is an error naming the record and
    field); when None the candidates are the models the records use, sorted. ``embed`` maps texts to
    (N, E) vectors (MiniLM by default). ``known_queries`` (key -> row) are not re-embedded: the
    caller already has their vectors, and the returned graph holds zeros in those rows.
    """
    embed = embed or default_embed
    if not records:
        raise GraphError("-", "records", "no records: the graph needs at least one user")
    for r, rec in enumerate(records):
        if not isinstance(rec, GMTRecord):
            raise GraphError(r + record_offset, "record", f"expected a GMTRecord, got {type(rec).__name__}")
    if llms is None:
        llms = sorted({it.model_used for rec in records for it in rec.interactions})
    llms = list(llms)
    if len(set(llms)) != len(llms):
        raise GraphError("-", "llms", f"duplicate candidate names in {llms}")
    llm_idx = {m: i for i, m in enumerate(llms)}

    users: list[str] = []
    user_idx: dict[str, int] = {}
    query_keys: list[str] = []
    query_texts: list[str] = []
    q_idx: dict[str, int] = {}
    rows: list[tuple[int, int, int, float, float, str, int, int]] = []  # user, query, llm, fb, ts, session, rec, pos
    seen: dict[tuple[int, str, int, int], tuple[int, int]] = {}
    for r, rec in enumerate(records):
        rno = r + record_offset
        if rec.user_id not in user_idx:
            user_idx[rec.user_id] = len(users)
            users.append(rec.user_id)
        u = user_idx[rec.user_id]
        for p in rec.preferred_models:
            if p not in llm_idx:
                raise GraphError(rno, "preferred_models", f"'{p}' is not a known candidate {llms}")
        for j, it in enumerate(rec.interactions):
            if it.model_used not in llm_idx:
                raise GraphError(rno, f"interactions[{j}].model_used",
                                 f"'{it.model_used}' is not a known candidate; known: {llms}")
            key = text_key(it.query)
            if key not in q_idx:
                q_idx[key] = len(query_keys)
                query_keys.append(key)
                query_texts.append(it.query)
            q = q_idx[key]
            m = llm_idx[it.model_used]
            dup = (u, it.session_id or f"#rec{rno}", q, m)
            if dup in seen:
                fr, fj = seen[dup]
                raise GraphError(rno, f"interactions[{j}].model_used",
                                 f"'{it.model_used}' already rated for this query in session '{it.session_id or '(none)'}' "
                                 f"(record {fr}, interactions[{fj}])")
            seen[dup] = (rno, j)
            rows.append((u, q, m, it.user_feedback, it.timestamp, it.session_id, rno, j))

    # Turns: a conversation's interactions on the same query. Without a session_id, the same query
    # from the same user within one record is one turn.
    turn_of: dict[tuple, int] = {}
    unit_of: dict[tuple, int] = {}
    turn, unit = [], []
    for u, q, m, fb, ts, sid, rno, j in rows:
        tkey = (u, sid, q) if sid else (u, f"#rec{rno}", q)
        turn.append(turn_of.setdefault(tkey, len(turn_of)))
        ukey = (u, sid) if sid else ("turn", tkey)
        unit.append(unit_of.setdefault(ukey, len(unit_of)))

    # Previous session: within a conversation, turns ordered by their first timestamp; each
    # interaction links to the same candidate's interaction on the previous turn, else to the
    # previous turn's earliest interaction.
    n = len(rows)
    prev = [-1] * n
    by_conv: dict[tuple[int, str], dict[int, list[int]]] = {}
    for i, (u, q, m, fb, ts, sid, rno, j) in enumerate(rows):
        if sid:
            by_conv.setdefault((u, sid), {}).setdefault(turn[i], []).append(i)
    for conv in by_conv.values():
        ordered = sorted(conv.values(), key=lambda ids: (min(rows[i][4] for i in ids), min(ids)))
        for before, now in zip(ordered, ordered[1:]):
            first = min(before, key=lambda i: (rows[i][4], i))
            by_llm = {rows[i][2]: i for i in before}
            for i in now:
                prev[i] = by_llm.get(rows[i][2], first)

    known = known_queries or {}
    dim = None
    to_embed = [(i, t) for i, (k, t) in enumerate(zip(query_keys, query_texts)) if k not in known]
    llm_texts = [describe_llm(m, llm_descriptions) for m in llms]
    texts = [t for _, t in to_embed] + ([] if llm_x is not None else llm_texts)
    vecs = np.asarray(embed(texts), dtype=np.float32) if texts else np.zeros((0, 0), dtype=np.float32)
    if texts:
        if vecs.ndim != 2 or vecs.shape[0] != len(texts):
            raise ValueError(f"embed: returned shape {vecs.shape} for {len(texts)} texts")
        dim = vecs.shape[1]
    elif llm_x is not None:
        dim = llm_x.shape[1]
    query_x = torch.zeros(len(query_keys), dim)
    for row, (i, _) in enumerate(to_embed):
        query_x[i] = torch.from_numpy(vecs[row])
    if llm_x is None:
        llm_x = torch.from_numpy(vecs[len(to_embed):].copy())
    if llm_x.shape[1] != dim:
        raise ValueError(f"llm_x: dim {llm_x.shape[1]} != query embedding dim {dim}")

    col = list(zip(*rows)) if rows else [[]] * 8
    return GMTGraph(
        users=users, llms=llms, llm_descriptions=llm_texts, query_keys=query_keys, query_x=query_x,
        llm_x=llm_x.float(),
        user=torch.tensor(col[0], dtype=torch.long), query=torch.tensor(col[1], dtype=torch.long),
        llm=torch.tensor(col[2], dtype=torch.long), feedback=torch.tensor(col[3], dtype=torch.float32),
        turn=torch.tensor(turn, dtype=torch.long), prev=torch.tensor(prev, dtype=torch.long),
        unit=torch.tensor(unit, dtype=torch.long), timestamp=torch.tensor(col[4], dtype=torch.float64))


def interactions_from_dicts(items: Sequence[Interaction | dict], user_id: str = "") -> list[Interaction]:
    """Interactions given as dicts (e.g. over HTTP) -> validated ``Interaction``s; errors name the item."""
    out = []
    for i, it in enumerate(items):
        if isinstance(it, Interaction):
            out.append(it)
            continue
        try:
            out.append(Interaction.from_dict(it, f"interactions[{i}]."))
        except RecordError as e:
            raise GraphError(user_id or "-", e.field, e.message) from None
    return out
