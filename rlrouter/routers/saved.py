"""Saved routers: one folder per trained router, so the router the Serve app serves is the router
evaluate_router ranked (same config entry, same fitted state).

A router folder holds ``manifest.json`` and the router's fitted state::

    manifest.json    format, version, name, type, spec, candidates, weak, strong, threshold,
                     calibration, embedding, seed, train, state
    knn.npz          knn: the training prompts' embeddings and strong-minus-weak gains
    mf.pt            mf: the torch state dict (its text width is in ``state``)
    probe.npz        probe: the feature scaling and the head weights
    encoder/         encoder: the MiniLM + LoRA classifier (``rlrouter.intent.model.IntentModel.save``)
    selector.json    selector: its posteriors (``rlrouter.selector.persistence`` snapshot format)
    members/<key>/   ensemble: each member's state, as above

``spec`` is the config entry the router was built from (``build_router``), relative paths made absolute;
``gmtrouter``, ``router_r1`` and ``intent`` keep their checkpoints where they are and ``spec`` names them.
Loading builds the router from ``spec`` again and puts the state back, so the scores are the saved
router's, bit for bit on the same machine.

``calibration`` (threshold routers) holds the quantiles of the router's strong scores on its training
prompts: a target share of strong calls maps to a threshold there, as RouteLLM's ``calibrate_threshold``
does on its own held-in prompts. ``threshold`` is the router's default operating point.

A router type of a plugin saves and loads too when its router class has ``save_state(folder) -> dict``
and ``load_state(folder, state)``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlrouter.routers import adapters as _adapters  # noqa: F401 - registers selector, intent, gmtrouter, router_r1
from rlrouter.routers import baselines as _baselines  # noqa: F401 - registers always, random, knn, mf
from rlrouter.routers import encoder_router as _encoder_router  # noqa: F401 - registers encoder
from rlrouter.routers import learned as _learned  # noqa: F401 - registers probe, ensemble
from rlrouter.routers import traffic_router as _traffic_router  # noqa: F401 - registers traffic_knn
from rlrouter.routers.adapters import CostAwareCategoryRouter, SelectorRouter
from rlrouter.routers.baselines import KNNRouter, MFRouter
from rlrouter.routers.encoder_router import LABELS, EncoderRouter
from rlrouter.routers.learned import EnsembleRouter, ProbeRouter
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, build_router, load_plugins
from rlrouter.pool.base import Candidate

FORMAT = "rlrouter.router"
VERSION = 1
MANIFEST = "manifest.json"
CALIBRATION_POINTS = 1001  # quantiles at 0, 0.1%, ..., 100%: a share maps to a threshold within 0.1%
# spec fields that name files: made absolute at save time, so the folder loads from any working directory
PATH_FIELDS = ("checkpoint", "pool")


class SavedRouterError(ValueError):
    """A router folder that cannot be saved or loaded; the message names the folder and the field."""


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """Quantiles of a router's strong scores on its training prompts (``quantiles[i]`` is the
    ``i / (len - 1)`` quantile, numpy's linear method), and how many prompts they came from."""

    quantiles: tuple[float, ...]
    n: int

    @classmethod
    def from_scores(cls, scores: np.ndarray, points: int = CALIBRATION_POINTS) -> Calibration:
        s = np.asarray(scores, dtype=np.float64)
        if s.size == 0:
            raise ValueError("calibration: no scores (no training prompts)")
        if np.isnan(s).any():
            raise ValueError("calibration: a strong score is NaN")
        with np.errstate(invalid="ignore"):  # +-inf scores (intent categories with no price gap) stay inf
            q = np.quantile(s, np.linspace(0.0, 1.0, points))
        q = np.where(np.isnan(q), np.sort(s)[np.rint(np.linspace(0, s.size - 1, points)).astype(int)], q)
        return cls(tuple(float(x) for x in q), int(s.size))

    def threshold(self, strong_share: float) -> float:
        """The threshold that sends ``strong_share`` of the training prompts to strong: their
        (1 - share) quantile, as ``routers.share_threshold``; +inf for a share of 0."""
        if not (isinstance(strong_share, (int, float)) and 0.0 <= strong_share <= 1.0):
            raise ValueError(f"strong_share: must be a number in [0, 1], got {strong_share!r}")
        if strong_share == 0:
            return math.inf
        q = self.quantiles
        pos = (1.0 - strong_share) * (len(q) - 1)
        lo = min(int(math.floor(pos)), len(q) - 1)
        hi = min(lo + 1, len(q) - 1)
        frac = pos - lo
        a, b = q[lo], q[hi]
        if frac < 1e-9 or a == b:
            return a
        if not (math.isfinite(a) and math.isfinite(b)):
            return a if frac < 0.5 else b
        return a + (b - a) * frac

    def strong_share(self, threshold: float) -> float:
        """Share of the training prompts whose score is at or above ``threshold`` (to 1 / (len - 1))."""
        q = np.asarray(self.quantiles)
        if threshold > q[-1]:
            return 0.0
        if threshold <= q[0]:
            return 1.0
        # the first quantile level at which the scores reach the threshold
        i = int(np.searchsorted(q, threshold, side="left"))
        return round(1.0 - i / (len(q) - 1), 6)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "quantiles": list(self.quantiles)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        return cls(tuple(float(x) for x in d["quantiles"]), int(d["n"]))


# ---------------------------------------------------------------- manifest


@dataclass
class Manifest:
    """What a router folder says about itself (``manifest.json``)."""

    name: str
    type: str
    spec: dict[str, Any]
    """The config entry's fields besides type and name (``build_router`` rebuilds the router from them)."""
    candidates: list[dict[str, Any]]
    """[{name, price_in, price_out}]: the eval set's candidates, in column order."""
    weak: str
    strong: str
    threshold: float | None = None
    """Threshold routers: the default threshold (calibrated to ``train.strong_share`` when set)."""
    calibration: Calibration | None = None
    embedding: dict[str, Any] = field(default_factory=lambda: {"model": "minilm-l6"})
    """The embedder the router was fitted with (``rlrouter.embeddings``): the one it must be served with."""
    seed: int = 0
    train: dict[str, Any] = field(default_factory=dict)
    """Where it learned: data sources, rows, split, the strong share its default threshold targets."""
    state: dict[str, Any] = field(default_factory=dict)
    """What the type's state files need besides themselves (e.g. MF's text width)."""
    online: bool = False
    """True for a router that keeps learning from feedback when served (the bandit selector)."""
    plugins: list[str] = field(default_factory=list)
    saved_at: float = 0.0
    format: str = FORMAT
    version: int = VERSION

    @property
    def candidate_names(self) -> list[str]:
        return [c["name"] for c in self.candidates]

    @property
    def threshold_router(self) -> bool:
        return self.calibration is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["calibration"] = self.calibration.to_dict() if self.calibration is not None else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> Manifest:
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise SavedRouterError(f"{where}: not a saved router (format is not '{FORMAT}')")
        if d.get("version") != VERSION:
            raise SavedRouterError(f"{where}.version: {d.get('version')!r}, this code reads version {VERSION}")
        d = dict(d)
        missing = [k for k in ("name", "type", "spec", "candidates", "weak", "strong") if k not in d]
        if missing:
            raise SavedRouterError(f"{where}: missing fields {missing}")
        cal = d.pop("calibration", None)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise SavedRouterError(f"{where}: unknown fields {unknown}")
        m = cls(**d, calibration=Calibration.from_dict(cal) if cal else None)
        names = m.candidate_names
        for f in ("weak", "strong"):
            if getattr(m, f) not in names:
                raise SavedRouterError(f"{where}.{f}: '{getattr(m, f)}' is not one of the candidates {names}")
        return m


def read_manifest(folder: str | Path) -> Manifest:
    """The manifest of a router folder; a clear error when the folder is not one."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise SavedRouterError(f"{folder}: no {MANIFEST} (not a router folder written by jobs/train_router.py)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SavedRouterError(f"{path}: not JSON ({e})") from None
    return Manifest.from_dict(doc, str(path))


# ---------------------------------------------------------------- state of each router type


def write_state(router: Router, folder: Path) -> dict[str, Any]:
    """Write ``router``'s fitted state under ``folder``; returns what the manifest keeps of it."""
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(router, "save_state"):
        return dict(router.save_state(folder) or {})
    if isinstance(router, KNNRouter):
        if router._keys is None or router._gain is None:
            raise SavedRouterError(f"{router.name}: fit() before saving")
        np.savez(folder / "knn.npz", keys=router._keys, gain=router._gain)
        return {}
    if isinstance(router, MFRouter):
        import torch

        if router.model is None:
            raise SavedRouterError(f"{router.name}: fit() before saving")
        torch.save(router.model.state_dict(), folder / "mf.pt")
        return {"text_dim": int(router.model.text_proj.in_features), "train_loss": list(router.train_loss)}
    if isinstance(router, ProbeRouter):
        if not router._models:
            raise SavedRouterError(f"{router.name}: fit() before saving")
        arrays = {f"head{i}": w for i, w in enumerate(router._models)}
        if router._mu is not None:
            arrays.update(mu=router._mu, sd=router._sd)
        np.savez(folder / "probe.npz", **arrays)
        return {"heads": len(router._models), "scaled": router._mu is not None}
    if isinstance(router, EncoderRouter):
        if router.model is None:
            raise SavedRouterError(f"{router.name}: fit() before saving")
        router.model.save(folder / "encoder", "rl" if "ppo" in router.summary else "supervised", router.summary)
        return {}
    if isinstance(router, EnsembleRouter):
        members = {k: write_state(m, folder / "members" / k) for k, m in router.members.items()}
        return {"members": members, "stats": {k: list(v) for k, v in router._stats.items()}}
    if isinstance(router, SelectorRouter):
        from rlrouter.selector.persistence import encode_state, write_snapshot

        router.selector.state.pending.clear()  # decisions of the warm-up pass that got no feedback
        write_snapshot(folder / "selector.json", encode_state(router.selector.state))
        return {}
    if isinstance(router, CostAwareCategoryRouter):
        return {"score_of": dict(router.score_of)}
    if type(router).fit is not Router.fit:
        raise SavedRouterError(f"{router.name}: router class {type(router).__name__} learns in fit() and has no "
                               "saved-state format (give it save_state(folder) and load_state(folder, state))")
    return {}  # built from its config alone: fixed, random, gmtrouter, router_r1, intent with a given map


def read_state(router: Router, folder: Path, state: Mapping[str, Any]) -> None:
    """Put back the state ``write_state`` wrote."""
    if hasattr(router, "load_state"):
        router.load_state(folder, state)
        return
    if isinstance(router, KNNRouter):
        with np.load(folder / "knn.npz") as z:
            router._keys, router._gain = z["keys"], z["gain"]
    elif isinstance(router, MFRouter):
        import torch

        router.model = router._build(int(state["text_dim"]))
        router.model.load_state_dict(torch.load(folder / "mf.pt", weights_only=True))
        router.model.eval()
        router.train_loss = list(state.get("train_loss", []))
    elif isinstance(router, ProbeRouter):
        with np.load(folder / "probe.npz") as z:
            router._models = [z[f"head{i}"] for i in range(int(state["heads"]))]
            if state.get("scaled"):
                router._mu, router._sd = z["mu"], z["sd"]
    elif isinstance(router, EncoderRouter):
        from rlrouter.intent.model import IntentModel

        router.model = IntentModel.from_dir(folder / "encoder", trainable=False).eval()
        if list(router.model.labels) != list(LABELS):
            raise SavedRouterError(f"{folder}/encoder: labels {router.model.labels}, expected {list(LABELS)}")
    elif isinstance(router, EnsembleRouter):
        for k, m in router.members.items():
            read_state(m, folder / "members" / k, state["members"][k])
        router._stats = {k: (float(v[0]), float(v[1])) for k, v in state["stats"].items()}
    elif isinstance(router, SelectorRouter):
        from rlrouter.selector.persistence import read_snapshot

        snap = read_snapshot(folder / "selector.json")
        if snap is None:
            raise SavedRouterError(f"{folder}: no selector.json")
        router.selector.state = snap
    elif isinstance(router, CostAwareCategoryRouter):
        router.score_of = {str(k): float(v) for k, v in state["score_of"].items()}


# ---------------------------------------------------------------- save / load


def _absolute_paths(spec: Mapping[str, Any], base: Path) -> dict[str, Any]:
    out = {}
    for k, v in spec.items():
        if k in PATH_FIELDS and isinstance(v, str) and v != "base" and "://" not in v and not Path(v).is_absolute():
            v = str((base / v).resolve())
        elif isinstance(v, Mapping):
            v = _absolute_paths(v, base)
        out[k] = v
    return out


def save_router(router: Router, folder: str | Path, *, type_name: str, spec: Mapping[str, Any],
                candidates: Sequence[Candidate], weak: int, strong: int, calibration: Calibration | None = None,
                embedding: Mapping[str, Any] | None = None, seed: int = 0, train: Mapping[str, Any] | None = None,
                plugins: Sequence[str] = (), base: str | Path = ".") -> Manifest:
    """Write ``router`` (fitted) as a router folder; ``spec`` is its config entry without type and name,
    ``calibration`` its scores' quantiles on the training prompts (threshold routers)."""
    folder = Path(folder)
    if isinstance(router, ThresholdRouter) and calibration is None:
        raise SavedRouterError(f"{router.name}: a threshold router is saved with its calibration")
    spec = {k: v for k, v in spec.items() if k not in ("type", "name")}
    state = write_state(router, folder)
    threshold = float(router.threshold) if isinstance(router, ThresholdRouter) else None
    m = Manifest(name=router.name, type=type_name, spec=_absolute_paths(spec, Path(base)),
                 candidates=[{"name": c.name, "price_in": c.price_in, "price_out": c.price_out} for c in candidates],
                 weak=candidates[weak].name, strong=candidates[strong].name, threshold=threshold,
                 calibration=calibration if isinstance(router, ThresholdRouter) else None,
                 embedding=dict(embedding or {"model": "minilm-l6"}), seed=int(seed), train=dict(train or {}),
                 state=state, online=isinstance(router, SelectorRouter) or bool(getattr(router, "online", False)), plugins=list(plugins), saved_at=time.time())
    doc = m.to_dict()
    cal = doc.pop("calibration")
    text = json.dumps({**doc, "calibration": "@"}, indent=1)  # the quantiles on one line, not 1,001
    (folder / MANIFEST).write_text(text.replace('"calibration": "@"', f'"calibration": {json.dumps(cal)}') + "\n",
                                   encoding="utf-8")
    return m


def embedder(embedding: Mapping[str, Any], cache: bool = False) -> Callable[[list[str]], np.ndarray]:
    """The embedder a manifest names (``rlrouter.embeddings.embed_texts``); served queries are not cached
    on disk by default (every query would be a new file entry)."""
    model = str(embedding.get("model", "minilm-l6"))

    def embed(texts: list[str]) -> np.ndarray:
        from rlrouter.embeddings import embed_texts

        texts = list(texts)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return embed_texts(texts, model=model, cache=cache)

    return embed


@dataclass
class SavedRouter:
    """A loaded router folder: the manifest and the router, state restored."""

    folder: Path
    manifest: Manifest
    router: Router

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def threshold_router(self) -> bool:
        return isinstance(self.router, ThresholdRouter)

    def threshold_for(self, threshold: float | None = None, strong_share: float | None = None) -> float:
        """The threshold of a request: the one given, the one that sends ``strong_share`` of the training
        prompts to strong, or the saved default."""
        if threshold is not None and strong_share is not None:
            raise ValueError("give a threshold or a strong share, not both")
        if strong_share is not None:
            assert self.manifest.calibration is not None
            return self.manifest.calibration.threshold(strong_share)
        if threshold is not None:
            return float(threshold)
        assert self.manifest.threshold is not None
        return self.manifest.threshold

    def route(self, prompts: list[str], threshold: float | None = None,
              strong_share: float | None = None) -> tuple[np.ndarray, np.ndarray | None, float | None]:
        """(candidate index per prompt, strong scores or None, the threshold used or None)."""
        r = self.router
        if isinstance(r, ThresholdRouter):
            t = self.threshold_for(threshold, strong_share)
            s = np.asarray(r.strong_score(prompts), dtype=np.float64)
            return np.where(s >= t, r.strong, r.weak), s, t
        if threshold is not None or strong_share is not None:
            raise ValueError(f"router '{self.name}' ({self.manifest.type}) picks a candidate itself: it takes no "
                             "threshold or strong share")
        return np.asarray(r.decide(prompts), dtype=np.int64), None, None


def _placeholder_train(candidates: Sequence[Candidate]) -> EvalSet:
    """A one-row eval set with the saved candidates: a factory reads only ``ctx.train.candidates`` (the
    selector's prices) once the router is fitted; loading never trains."""
    m = len(candidates)
    return EvalSet(prompts=[""], candidates=list(candidates), scores=np.zeros((1, m)), costs=np.zeros((1, m)),
                   sources=["saved"], prompt_tokens=np.ones(1), completion_tokens=np.ones((1, m)))


def load_router(folder: str | Path, embed: Callable[[list[str]], np.ndarray] | None = None) -> SavedRouter:
    """Load a router folder. ``embed``: the embedder to use (default: the one the manifest names)."""
    folder = Path(folder)
    m = read_manifest(folder)
    load_plugins(m.plugins)
    cands = [Candidate(c["name"], float(c.get("price_in", 0.0)), float(c.get("price_out", 0.0)))
             for c in m.candidates]
    names = m.candidate_names
    ctx = RouterContext(candidates=names, weak=names.index(m.weak), strong=names.index(m.strong),
                        train=_placeholder_train(cands), embed=embed or embedder(m.embedding), seed=m.seed)
    try:
        router = build_router({"type": m.type, "name": m.name, **m.spec}, ctx)
        read_state(router, folder, m.state)
    except (KeyError, OSError) as e:
        raise SavedRouterError(f"{folder}: the saved state of '{m.name}' ({m.type}) does not load: "
                               f"{type(e).__name__}: {e}") from None
    if isinstance(router, ThresholdRouter):
        if m.calibration is None or m.threshold is None:
            raise SavedRouterError(f"{folder}/{MANIFEST}: threshold router '{m.name}' without calibration/threshold")
        router.threshold = m.threshold
    return SavedRouter(folder, m, router)
