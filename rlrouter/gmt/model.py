"""GMTRouter's model: an HGT encoder over the interaction graph and a cross-attention predictor.

The encoder projects each node type to ``hidden_dim``, then runs ``num_layers`` HGTConv layers
(4 heads), each followed by dropout, a residual connection and LayerNorm (GMTRouter, Sec. 3.2: 2
layers, 3 when sessions are multi-turn). The predictor scores a candidate for a (user, query) pair:
the candidate's embedding attends over the user's and the query's embeddings, and an MLP reads the
attended context next to the candidate embedding (Sec. 3.3).

Only HGTConv from torch-geometric is used; it runs without pyg-lib / torch-scatter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import HGTConv
from torch_geometric.nn.dense.linear import HeteroLinear

from rlrouter.gmt.graph import EDGE_TYPES, NODE_TYPES


@dataclass
class GMTModelConfig:
    """Sizes of the encoder and predictor. ``in_dims`` is set from the graph (embedding width)."""

    hidden_dim: int = 64
    """Width of every node embedding; the paper uses the PLM width (768), 64 is plenty for a few
    thousand sessions and keeps CPU training in seconds."""
    num_layers: int = 0
    """HGT layers; 0 means the paper's rule: 3 when the graph is multi-turn, else 2."""
    heads: int = 4
    """Attention heads in each HGTConv and in the predictor (paper: 4)."""
    dropout: float = 0.1
    predictor_hidden: int = 64
    """Hidden width of the predictor's output MLP."""
    embed_dim: int = 384
    """Width of the query / llm text embeddings (MiniLM-L6: 384)."""

    def __post_init__(self) -> None:
        for name in ("hidden_dim", "heads", "predictor_hidden", "embed_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if not isinstance(self.num_layers, int) or self.num_layers < 0:
            raise ValueError(f"num_layers: expected an int >= 0 (0 = auto), got {self.num_layers!r}")
        if self.hidden_dim % self.heads:
            raise ValueError(f"hidden_dim: {self.hidden_dim} is not divisible by heads={self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a value in [0, 1), got {self.dropout}")

    def resolved(self, multi_turn: bool) -> "GMTModelConfig":
        """A copy with ``num_layers`` fixed by the paper's rule when it is 0 (auto)."""
        d = asdict(self)
        if d["num_layers"] == 0:
            d["num_layers"] = 3 if multi_turn else 2
        return GMTModelConfig(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def in_dims(embed_dim: int) -> dict[str, int]:
    """Input width per node type: zeros (1) for user/session, [feedback, feedback x llm] for response."""
    return {"user": 1, "session": 1, "query": embed_dim, "response": 1 + embed_dim, "llm": embed_dim}


class _ConcatHeteroLinear(HeteroLinear):
    """HeteroLinear whose pure-torch path concatenates per-type products instead of writing them
    into slices of one buffer.

    Without pyg-lib, HGTConv's relation transforms take ``forward_naive``, whose slice assignments
    make autograd copy and zero-fill the whole (heads x edge types x nodes) buffer once per slice in
    backward: ~90% of a training step on CPU. Same weights, same products, same order: only the backward cost
    changes.
    """

    def forward_naive(self, x: torch.Tensor, type_ptr: torch.Tensor) -> torch.Tensor:
        sizes = type_ptr.diff().tolist()
        # torch.split, not slicing: a slice's backward zero-fills a gradient the size of all of x.
        parts = [xi @ self.weight[i] for i, xi in enumerate(torch.split(x, sizes))]
        return torch.cat(parts, dim=0) if parts else x.new_empty(0, self.out_channels)


def _fast_hgt(conv: HGTConv) -> HGTConv:
    for lin in (conv.k_rel, conv.v_rel):
        if type(lin) is HeteroLinear:
            lin.__class__ = _ConcatHeteroLinear
    return conv


class HeteroEncoder(nn.Module):
    """Per-type input projection, then HGTConv -> dropout -> residual -> LayerNorm, per layer."""

    def __init__(self, cfg: GMTModelConfig):
        super().__init__()
        if cfg.num_layers <= 0:
            raise ValueError("num_layers: resolve the config (GMTModelConfig.resolved) before building")
        h = cfg.hidden_dim
        # Text features are unit vectors (entries ~0.05) and the rating-bound response features are
        # smaller still: normalising them first keeps node differences from drowning in the input
        # bias, which otherwise made every user embedding nearly identical after the HGT layers.
        self.inp = nn.ModuleDict({t: (nn.Sequential(nn.LayerNorm(d), nn.Linear(d, h)) if d > 1 else nn.Linear(d, h))
                                  for t, d in in_dims(cfg.embed_dim).items()})
        meta = (list(NODE_TYPES), list(EDGE_TYPES))
        self.convs = nn.ModuleList(_fast_hgt(HGTConv(h, h, meta, heads=cfg.heads)) for _ in range(cfg.num_layers))
        self.norms = nn.ModuleList(nn.ModuleDict({t: nn.LayerNorm(h) for t in NODE_TYPES})
                                   for _ in range(cfg.num_layers))
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[tuple[str, str, str], torch.Tensor]) -> dict[str, torch.Tensor]:
        h = {t: self.inp[t](x) for t, x in x_dict.items()}  # each (N_t, H)
        for conv, norms in zip(self.convs, self.norms):
            out = conv(h, edge_index_dict)
            nxt = {}
            for t, x in h.items():
                o = out.get(t)
                # A type with no incoming edge this step keeps its embedding (residual with zero update).
                nxt[t] = norms[t](x + self.dropout(o)) if o is not None else norms[t](x)
            h = nxt
        return h


class PreferencePredictor(nn.Module):
    """score(user, query, candidate): the candidate attends over [user, query], then an MLP."""

    def __init__(self, cfg: GMTModelConfig):
        super().__init__()
        h, p = cfg.hidden_dim, cfg.predictor_hidden
        self.user_proj = nn.Linear(h, h)
        self.query_proj = nn.Linear(h, h)
        self.llm_proj = nn.Linear(h, h)
        self.attn = nn.MultiheadAttention(h, cfg.heads, batch_first=True)
        self.out = nn.Sequential(nn.Linear(3 * h, p), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(p, 1))

    def forward(self, user: torch.Tensor, query: torch.Tensor, llm: torch.Tensor) -> torch.Tensor:
        """user (B, H), query (B, H), llm (B, K, H) -> logits (B, K)."""
        b, k, h = llm.shape
        u = self.user_proj(user)  # (B, H)
        q = self.query_proj(query)  # (B, H)
        lm = self.llm_proj(llm)  # (B, K, H)
        ctx = torch.stack([u, q], dim=1)  # (B, 2, H)
        ctx = ctx.unsqueeze(1).expand(b, k, 2, h).reshape(b * k, 2, h)  # (B*K, 2, H)
        att, _ = self.attn(lm.reshape(b * k, 1, h), ctx, ctx)  # (B*K, 1, H)
        att = att.reshape(b, k, h)
        # The elementwise product gives the MLP a direct user x query interaction term; the
        # paper's concat [attended, llm] alone must learn it through the attention weights.
        uq = (u * q).unsqueeze(1).expand(b, k, h)  # (B, K, H)
        return self.out(torch.cat([att, lm, uq], dim=-1)).squeeze(-1)  # (B, K)


class GMTRouterModel(nn.Module):
    """Encoder + predictor. ``encode`` runs message passing; ``score`` reads node embeddings."""

    def __init__(self, cfg: GMTModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = HeteroEncoder(cfg)
        self.predictor = PreferencePredictor(cfg)

    def encode(self, x_dict, edge_index_dict) -> dict[str, torch.Tensor]:
        return self.encoder(x_dict, edge_index_dict)

    def score(self, h: dict[str, torch.Tensor], users: torch.Tensor, queries: torch.Tensor,
              llms: torch.Tensor) -> torch.Tensor:
        """users (B,), queries (B,), llms (B, K) node ids -> logits (B, K). Padding (-1) scores 0."""
        pad = llms < 0
        llm_h = h["llm"][llms.clamp(min=0)]  # (B, K, H)
        s = self.predictor(h["user"][users], h["query"][queries], llm_h)
        return s.masked_fill(pad, 0.0)

    def forward(self, x_dict, edge_index_dict, users, queries, llms) -> torch.Tensor:
        return self.score(self.encode(x_dict, edge_index_dict), users, queries, llms)


def _isolated_nodes(model: GMTRouterModel, query_x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Embeddings of nodes that have no edges: ``query_x``'s queries and one node of every other type.

    An isolated node receives no messages, so its output depends only on its own features; a graph of
    just these nodes (no edges) gives the same result as the full graph would, at a fraction of the cost.
    """
    e, dev = query_x.shape[1], query_x.device
    x = {"user": torch.zeros(1, 1, device=dev), "session": torch.zeros(1, 1, device=dev), "query": query_x,
         "response": torch.zeros(1, 1 + e, device=dev), "llm": torch.zeros(1, e, device=dev)}
    empty = torch.empty(2, 0, dtype=torch.long, device=dev)
    return model.encode(x, {et: empty for et in EDGE_TYPES})


def isolated_query_embedding(model: GMTRouterModel, query_x: torch.Tensor) -> torch.Tensor:
    """(N, H) embeddings of query nodes that have no edges. Used for queries never seen in training."""
    return _isolated_nodes(model, query_x)["query"]


def cold_user_embedding(model: GMTRouterModel) -> torch.Tensor:
    """(H,) the embedding of a user with no history: a user node without edges.

    User features are zero, so every such user gets this same vector: it is what the few-shot curve
    measures at k = 0, and what routing a request without a known user id falls back to.
    """
    e, dev = model.cfg.embed_dim, next(model.parameters()).device
    return _isolated_nodes(model, torch.zeros(1, e, device=dev))["user"][0]


def score_cold(model: GMTRouterModel, h: dict[str, torch.Tensor], query_x: torch.Tensor,
               llms: torch.Tensor) -> torch.Tensor:
    """Logits (B, K) for a user with no history on queries seen as new, isolated nodes.

    ``query_x`` (B, E) are the queries' text features, ``llms`` (B, K) llm node ids (-1 pads, scored
    0) read from ``h``. This is the path an unknown user's request on an unseen query takes at serving
    time (``GMTRouterScorer.score_batch(user_id=None)``), and the one ``GMTTrainConfig.cold_frac`` trains:
    without it the predictor never sees these two embeddings in training.
    """
    q = isolated_query_embedding(model, query_x)  # (B, H)
    u = cold_user_embedding(model).expand(q.shape[0], -1)  # (B, H), one vector for every cold user
    s = model.predictor(u, q, h["llm"][llms.clamp(min=0)])  # (B, K)
    return s.masked_fill(llms < 0, 0.0)


def pairwise_logistic(s_win: torch.Tensor, s_lose: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(s_win - s_lose), elementwise (GMTRouter's pairwise loss)."""
    return F.softplus(-(s_win - s_lose))
