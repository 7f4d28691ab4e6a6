"""Intent classifier: a frozen encoder with a LoRA adapter (peft), mean pooling and a trainable head.

The same module carries a value head for the PPO phase (``ppo.py``); it reads the pooled features
detached, so value regression never moves the representation the classifier relies on. A trained
classifier is saved as a directory holding the peft adapter (``adapter_config.json`` +
``adapter_model.safetensors``), ``head.safetensors`` and ``intent_meta.json``; :class:`IntentClassifier`
loads one for serving.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, Sequence

import torch
from torch import nn

META_FILE = "intent_meta.json"
HEAD_FILE = "head.safetensors"


def resolve_encoder(name: str) -> str:
    """A path or hub id for ``from_pretrained``: "minilm-l6" (bundled), a local folder or an HF id."""
    from rlrouter.models import resolve_model

    return resolve_model(name)


@dataclass
class EncoderConfig:
    """How the classifier is built. Saved with every adapter, so a loaded model is rebuilt the same."""

    encoder: str = "minilm-l6"
    """Registry name, HF hub id or local path of the encoder (any AutoModel encoder)."""
    max_length: int = 64
    """Tokens per query; MMLU questions have a median of ~30 tokens, long ones are cut."""
    lora_r: int = 8
    """LoRA rank: the adapter's capacity."""
    lora_alpha: int = 16
    """LoRA scale numerator (scale = alpha / r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch (off in the PPO phase, which runs in eval mode)."""
    target_modules: list[str] | None = None
    """Modules that get LoRA; None takes peft's default for the encoder type (query/value for BERT)."""
    layers_to_transform: list[int] | None = None
    """Encoder layers that get LoRA; None = all. Upper layers only cuts the backward pass short."""
    head_dropout: float = 0.1
    """Dropout before the classification head (supervised phase only)."""

    def __post_init__(self) -> None:
        if not self.encoder:
            raise ValueError("encoder: must name an encoder")
        if self.max_length < 8:
            raise ValueError(f"max_length: must be >= 8, got {self.max_length}")
        if self.lora_r < 1:
            raise ValueError(f"lora_r: must be >= 1, got {self.lora_r}")
        if self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha: must be > 0, got {self.lora_alpha}")
        for name in ("lora_dropout", "head_dropout"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {v}")
        if self.target_modules is not None:
            self.target_modules = list(self.target_modules)
        if self.layers_to_transform is not None:
            self.layers_to_transform = [int(i) for i in self.layers_to_transform]


@dataclass
class IntentMeta:
    """What ``intent_meta.json`` holds: the label order of the head and how to rebuild the model."""

    labels: list[str]
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    phase: str = "supervised"
    metrics: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.labels) < 2:
            raise ValueError(f"labels: need at least 2, got {self.labels}")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels: duplicates")
        if isinstance(self.encoder, dict):
            self.encoder = EncoderConfig(**self.encoder)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states that are not padding. hidden (B, T, H), mask (B, T) -> (B, H)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class IntentOutput(NamedTuple):
    """A tuple so DDP can walk the output like any other."""

    logits: torch.Tensor  # (B, L)
    values: torch.Tensor  # (B,)
    pooled: torch.Tensor  # (B, H)


class IntentModel(nn.Module):
    """Encoder + LoRA + mean pooling + classification head (+ value head for PPO)."""

    def __init__(self, labels: Sequence[str], cfg: EncoderConfig | None = None,
                 adapter_dir: str | Path | None = None, trainable: bool = True):
        super().__init__()
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModel, AutoTokenizer

        self.cfg = cfg or EncoderConfig()
        self.labels = list(labels)
        path = resolve_encoder(self.cfg.encoder)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        base = AutoModel.from_pretrained(path)
        if adapter_dir is not None:
            self.encoder = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=trainable)
        else:
            lora = LoraConfig(r=self.cfg.lora_r, lora_alpha=self.cfg.lora_alpha,
                              lora_dropout=self.cfg.lora_dropout, target_modules=self.cfg.target_modules,
                              layers_to_transform=self.cfg.layers_to_transform, bias="none")
            # get_peft_model freezes every base weight: only the LoRA matrices train
            self.encoder = get_peft_model(base, lora)
        hidden = base.config.hidden_size
        self.dropout = nn.Dropout(self.cfg.head_dropout)
        self.head = nn.Linear(hidden, len(self.labels))
        self.value_head = nn.Linear(hidden, 1)
        if adapter_dir is not None:
            from safetensors.torch import load_file

            self.load_state_dict(load_file(str(Path(adapter_dir) / HEAD_FILE)), strict=False)
        self.set_value_head_trainable(False)

    def set_value_head_trainable(self, on: bool) -> None:
        """The value head only trains in the PPO phase; frozen otherwise so DDP sees no unused grads."""
        self.value_head.requires_grad_(on)

    @property
    def device(self) -> torch.device:
        """Where the model lives (the launcher's device for the rank); inputs are built there."""
        return self.head.weight.device

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Pad to the longest query of the batch (not to max_length): most queries are short. On the
        model's device."""
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.cfg.max_length,
                             return_tensors="pt")
        return {"input_ids": enc["input_ids"].to(self.device), "attention_mask": enc["attention_mask"].to(self.device)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> IntentOutput:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooled = mean_pool(hidden, attention_mask)  # (B, H)
        logits = self.head(self.dropout(pooled))  # (B, L)
        values = self.value_head(pooled.detach()).squeeze(-1)  # (B,)
        return IntentOutput(logits=logits, values=values, pooled=pooled)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Copies of the parameters that train (LoRA, heads): what early stopping keeps and restores."""
        return {k: v.detach().clone() for k, v in self.named_parameters()
                if v.requires_grad or k.startswith(("head.", "value_head."))}

    def save(self, out_dir: str | Path, phase: str, metrics: dict | None = None) -> Path:
        """Write the adapter (peft, safetensors), the heads (safetensors) and the meta file."""
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(str(out), safe_serialization=True)
        heads = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()
                 if k.startswith(("head.", "value_head."))}
        save_file(heads, str(out / HEAD_FILE))
        meta = IntentMeta(labels=self.labels, encoder=self.cfg, phase=phase, metrics=metrics or {})
        (out / META_FILE).write_text(meta.to_json(), encoding="utf-8")
        return out

    @classmethod
    def from_dir(cls, adapter_dir: str | Path, trainable: bool = False) -> "IntentModel":
        adapter_dir = Path(adapter_dir)
        meta_path = adapter_dir / META_FILE
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path}: not an intent classifier directory")
        meta = IntentMeta(**json.loads(meta_path.read_text(encoding="utf-8")))
        return cls(meta.labels, meta.encoder, adapter_dir=adapter_dir, trainable=trainable)


class IntentClassifier:
    """Serving wrapper: ``IntentClassifier.load(dir).classify(texts) -> [(label, confidence)]``."""

    def __init__(self, model: IntentModel, batch_size: int = 32):
        self.model = model.eval()
        self.labels = model.labels
        self.batch_size = batch_size

    @classmethod
    def load(cls, adapter_dir: str | Path, batch_size: int = 32) -> "IntentClassifier":
        """Load a saved classifier. ``adapter_dir`` is one phase's folder (``.../supervised`` or
        ``.../rl``) or a run's output folder, where the RL adapter is preferred when present."""
        adapter_dir = Path(adapter_dir)
        if not (adapter_dir / META_FILE).exists():
            for phase in ("rl", "supervised"):
                if (adapter_dir / "adapters" / phase / META_FILE).exists():
                    adapter_dir = adapter_dir / "adapters" / phase
                    break
        return cls(IntentModel.from_dir(adapter_dir, trainable=False), batch_size=batch_size)

    @torch.inference_mode()
    def predict_proba(self, texts: Sequence[str]) -> torch.Tensor:
        """Softmax over labels, (N, L)."""
        out = []
        for i in range(0, len(texts), self.batch_size):
            batch = self.model.tokenize(texts[i:i + self.batch_size])
            out.append(torch.softmax(self.model(**batch).logits.float(), dim=-1))
        if not out:
            return torch.empty(0, len(self.labels))
        return torch.cat(out)

    def classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """The most likely label of each text and its probability."""
        if isinstance(texts, str):
            raise TypeError("texts: pass a list of strings, not one string")
        probs = self.predict_proba(list(texts))
        conf, idx = probs.max(dim=-1)
        return [(self.labels[i], float(c)) for i, c in zip(idx.tolist(), conf.tolist())]

    def timed_predict(self, texts: Sequence[str]) -> tuple[torch.Tensor, float]:
        """Probabilities and the wall-clock inference time per query in milliseconds."""
        t0 = time.perf_counter()
        probs = self.predict_proba(list(texts))
        return probs, (time.perf_counter() - t0) * 1000.0 / max(1, len(texts))
