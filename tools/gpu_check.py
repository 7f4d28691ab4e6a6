"""The GPU path's device check: what a lent GPU must confirm, stage by stage, in at most 7 minutes.

Each stage runs in its own process (a CUDA failure or an out-of-memory cannot take the others down) and
prints one line, ``PASS <stage> {json}`` or ``FAIL <stage> {json}``; all of them go into one result file.
The same script runs on CPU at toy size in ``make test`` (``tests/ops/test_gpu_check.py``), so it cannot rot.

    python tools/gpu_check.py                      # CUDA: full size; CPU: toy size
    make gpu-check                                 # the same, with the project's .venv
    python tools/gpu_check.py --render             # the result files -> docs/gpu.md's "device check" table

On a lent machine (Python 3.12, torch with CUDA, transformers, peft, accelerate, safetensors, tokenizers,
pytest; no ray, vllm, hydra or network), from the tree's root: ``PYTHONPATH=. python tools/gpu_check.py``.
Nothing is downloaded: the models are built from a config with random weights, the tokenizer is built here.

Stages:

- ``env``: versions, the device, bf16, NCCL;
- ``logits``: the learner's log-prob + entropy pass at the presets' shape (4 rows x 3,500 positions x Qwen2.5's
  151,936 vocabulary; toy: 1 x 1,024 x 32,768), bytes per logits element against ``rlrouter/learner/memory.py``;
- ``scale``: a learner shaped like Qwen2.5-3B (hidden 2048, MLP 11008, 16/2 heads of 128, its vocabulary) with
  4 layers and random weights, FSDP2 on NCCL with one rank, bf16, gradient checkpointing, the PPO preset's
  micro-batch 4 and a 3,500-position window in 4,096: one GRPO step's peak memory against the plan, tokens/s;
- ``checkpoint``: a step, a save to a ``file://`` URI, a restore into a fresh learner, the next step equal;
- ``gpu_tests``: the ``-m gpu`` tests (``tests/learner/test_gpu.py``: they skip on CPU).

Not built yet: the ``loop`` stage (rollouts with the HF backend on CUDA, the weight push into the generator,
the log-prob gap); docs/gpu.md says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
STAGES = ["env", "logits", "scale", "checkpoint", "gpu_tests"]
# the stage's wall-clock limit at full size; their sum stays under 7 minutes with the starts
LIMIT_S = {"env": 60, "logits": 60, "scale": 150, "checkpoint": 90, "gpu_tests": 60}
QWEN = dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16, num_key_value_heads=2,
            head_dim=128, vocab_size=151_936)
TOY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
           vocab_size=8_192)


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --- the pieces the stages share --------------------------------------------------------------------
def build_model(folder: Path, dims: dict[str, int], layers: int) -> str:
    """A Qwen2-shaped causal LM with random weights (seed 0) and a word-level tokenizer built here."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    cfg = Qwen2Config(num_hidden_layers=layers, tie_word_embeddings=True, max_position_embeddings=4096,
                      rope_theta=1e6, **dims)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(1000)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(folder)
    return str(folder)


def trajectories(rows: int, prompt: int, window: int, vocab: int, seed: int = 0) -> list[Any]:
    """``rows`` trajectories of ``prompt`` prompt tokens then ``window`` policy tokens (random ids)."""
    import torch

    from rlrouter.rollout.parsing import TrajectoryTokens

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rows):
        ids = torch.randint(2, vocab, (prompt + window,), generator=g).tolist()
        t = TrajectoryTokens(ids[:prompt])
        t.add_policy(ids[prompt:], [0.0] * window)
        out.append(t)
    return out


def init_one_rank() -> str:
    """torch.distributed with one rank (NCCL on CUDA, gloo on CPU); the rank's device."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    backend = "nccl" if cuda() else "gloo"
    if cuda():
        torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1)
    return "cuda:0" if cuda() else "cpu"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def learner_for(model: str, device: str, micro_batch: int, gradient_checkpointing: bool = True) -> Any:
    from rlrouter.learner.learner import Learner, LearnerConfig

    cfg = LearnerConfig(model=model, lora=False, algo="grpo", lr=1e-5, micro_batch_size=micro_batch,
                        strategy="fsdp", dtype="bfloat16", gradient_checkpointing=gradient_checkpointing,
                        grpo={"group_size": micro_batch})
    return Learner(cfg, 0, 1, device=device)


def rewards(n: int) -> list[float]:
    return [1.0 if i % 2 else -1.0 for i in range(n)]


# --- the stages: each returns (passed, facts) ------------------------------------------------------------
def stage_env(full: bool) -> tuple[bool, dict[str, Any]]:
    import peft
    import torch
    import torch.distributed as dist
    import transformers

    facts = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
             "peft": peft.__version__, "cuda": torch.version.cuda, "device": "cpu", "nccl": dist.is_nccl_available()}
    if cuda():
        facts.update(device=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported(),
                     gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
        return bool(facts["bf16"] and facts["nccl"]), facts
    return True, facts


def stage_logits(full: bool) -> tuple[bool, dict[str, Any]]:
    """Bytes per logits element of the learner's pass, forward + backward, beyond the bf16 logits."""
    from rlrouter.algos.common import LOGITS_CHUNK
    from rlrouter.learner.memory import CHUNK_BYTES, LOGITS_BYTES, measure_logits_bytes

    # toy: big enough that the process's own few MB of allocator noise stay under 0.3 B an element (at
    # 1 x 512 x 8,192 they were up to 2 B, and the stage failed now and then)
    rows, window, vocab = (4, 3500, QWEN["vocab_size"]) if full else (1, 1024, 32_768)
    plan = (LOGITS_BYTES - 2) + CHUNK_BYTES * min(LOGITS_CHUNK, window) / window
    if cuda():
        import torch

        from rlrouter.algos.common import chunked_logprobs_and_entropy

        logits = torch.randn(rows, window + 1, vocab, device="cuda", dtype=torch.bfloat16).requires_grad_()
        ids = torch.randint(0, vocab, (rows, window + 1), device="cuda")
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        logp, entropy = chunked_logprobs_and_entropy(logits, ids, 0.7, entropy_grad=True)
        (logp.sum() + entropy.sum()).backward()
        torch.cuda.synchronize()
        measured = (torch.cuda.max_memory_allocated() - base) / (rows * window * vocab)
        facts = {"rows": rows, "window": window, "vocab": vocab, "bytes_per_element": round(measured, 2)}
    else:
        m = measure_logits_bytes("chunked", rows, window, vocab, entropy_grad=True)
        facts = {"rows": rows, "window": window, "vocab": vocab,
                 "bytes_per_element": round(m["backward_bytes_per_element"], 2)}
    facts["plan_bytes_per_element"] = round(plan, 2)
    return facts["bytes_per_element"] <= plan, facts


def stage_scale(full: bool) -> tuple[bool, dict[str, Any]]:
    """One GRPO step of a Qwen2.5-3B-shaped learner (4 layers) under FSDP2 with one rank: peak memory
    against ``learner_memory_gib`` for the same shape, tokens/s."""
    import torch

    from rlrouter.learner.memory import ModelDims, learner_memory_gib

    dims, layers, rows, prompt, window = (QWEN, 4, 4, 596, 3500) if full else (TOY, 2, 2, 16, 48)
    device = init_one_rank()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        model = build_model(Path(d), dims, layers)
        learner = learner_for(model, device, rows)
        params = sum(p.numel() for p in learner.policy.parameters())
        emb = dims["vocab_size"] * dims["hidden_size"]
        trajs = trajectories(rows, prompt, window, dims["vocab_size"])
        learner.train_step(trajs, rewards(rows))  # warm-up: allocator, kernels
        if cuda():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        m = learner.train_step(trajs, rewards(rows))
        if cuda():
            torch.cuda.synchronize()
        took = time.perf_counter() - t0
    plan = learner_memory_gib(ModelDims(params=params, hidden=dims["hidden_size"], intermediate=dims["intermediate_size"],
                                        layers=layers, vocab=dims["vocab_size"], layer_params=(params - emb) / layers,
                                        embedding_params=emb),
                              ranks=1, micro_batch=rows, seq_len=prompt + window, logits_window=window)
    facts = {"layers": layers, "params_m": round(params / 1e6, 1), "rows": rows, "tokens": prompt + window,
             "window": window, "step_s": round(took, 2), "tokens_per_s": round(rows * (prompt + window) / took, 1),
             "loss": m.get("learner/loss"), "plan_gib": round(plan["total"], 2)}
    if not cuda():
        return bool(m.get("learner/grad_norm", 0) > 0), facts
    facts["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    # the plan counts the CUDA context, which max_memory_allocated does not see
    return facts["peak_gib"] <= plan["total"], facts


def stage_checkpoint(full: bool) -> tuple[bool, dict[str, Any]]:
    """A step, a save to a file:// URI, a restore into a fresh learner: the next step is the same."""
    import torch

    from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint

    dims, layers = (QWEN, 2) if full else (TOY, 2)
    device = init_one_rank()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        model = build_model(Path(d) / "model", dims, layers)
        trajs = trajectories(4, 32, 96, dims["vocab_size"])
        torch.manual_seed(0)
        a = learner_for(model, device, 2, gradient_checkpointing=False)
        a.train_step(trajs, rewards(4))
        uri = f"file://{d}/bucket/step_000001"
        save_checkpoint(uri, a, step=1)
        torch.manual_seed(1)
        b = learner_for(model, device, 2, gradient_checkpointing=False)
        load_checkpoint(uri, b)
        ma, mb = a.train_step(trajs, rewards(4)), b.train_step(trajs, rewards(4))
        same = all(torch.equal(v, b.trainable_state()[k]) for k, v in a.trainable_state().items())
    facts = {"loss_after": [ma["learner/loss"], mb["learner/loss"]], "weights_equal": same}
    return same and ma["learner/loss"] == mb["learner/loss"], facts


def stage_gpu_tests(full: bool) -> tuple[bool, dict[str, Any]]:
    files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("test_*.py"))
             if "pytest.mark.gpu" in p.read_text()]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files],
                       cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S["gpu_tests"] * 3)
    tail = (r.stdout.strip().splitlines() or [""])[-1]
    return r.returncode in (0, 5), {"files": files, "summary": tail}


STAGE_FNS: dict[str, Callable[[bool], tuple[bool, dict[str, Any]]]] = {
    "env": stage_env, "logits": stage_logits, "scale": stage_scale, "checkpoint": stage_checkpoint,
    "gpu_tests": stage_gpu_tests}


# --- the driver -------------------------------------------------------------------------------------
def run_stage(name: str, full: bool) -> dict[str, Any]:
    """``name`` in a process of its own, within its limit (x3 at toy size on a slow CPU)."""
    limit = LIMIT_S[name] * (1 if full else 3)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    try:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--stage", name,
                            "--size", "full" if full else "toy"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=limit)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(("PASS ", "FAIL "))), None)
        if line is None:
            row = {"stage": name, "passed": False, "error": (r.stderr or r.stdout)[-1500:]}
        else:
            verdict, _, rest = line.split(" ", 2)
            row = {"stage": name, "passed": verdict == "PASS", **json.loads(rest)}
    except subprocess.TimeoutExpired:
        row = {"stage": name, "passed": False, "error": f"over its {limit} s limit"}
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def render(paths: list[Path]) -> str:
    """docs/gpu.md's "device check" table from result files."""
    lines = ["| where | when | stage | result | facts |", "|---|---|---|---|---|"]
    for p in paths:
        res = json.loads(p.read_text())
        for row in res["stages"]:
            facts = {k: v for k, v in row.items() if k not in ("stage", "passed", "seconds", "error")}
            what = row.get("error") or ", ".join(f"{k} {v}" for k, v in facts.items() if k != "files")
            lines.append(f"| {res['device']} ({res['size']}) | {res['date']} | {row['stage']} | "
                         f"{'PASS' if row['passed'] else 'FAIL'} ({row['seconds']} s) | {what.replace('|', '/')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["full", "toy"], default=None, help="default: full on CUDA, toy on CPU")
    ap.add_argument("--stage", choices=STAGES, help="run one stage in this process (the driver does this)")
    ap.add_argument("--stages", nargs="*", default=STAGES)
    ap.add_argument("--out", default=None, help="default: benchmarks/results/gpu_check_<cuda|cpu>.json")
    ap.add_argument("--render", action="store_true", help="write docs/gpu.md's table from the result files")
    args = ap.parse_args(argv)
    if args.render:
        from rlrouter.eval.pool_report import replace_doc_block

        files = [p for p in (RESULTS / "gpu_check_cpu.json", RESULTS / "gpu_check_cuda.json") if p.exists()]
        return 0 if replace_doc_block(ROOT / "docs" / "gpu.md", "gpu check", render(files)) else 1
    full = (args.size or ("full" if cuda() else "toy")) == "full"
    if args.stage:
        try:
            passed, facts = STAGE_FNS[args.stage](full)
        except Exception as e:  # noqa: BLE001 - the stage's failure is its result line
            passed, facts = False, {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"{'PASS' if passed else 'FAIL'} {args.stage} {json.dumps(facts, default=str)}", flush=True)
        return 0 if passed else 1
    t0 = time.perf_counter()
    rows = []
    for name in args.stages:
        row = run_stage(name, full)
        rows.append(row)
        print(f"{'PASS' if row['passed'] else 'FAIL'} {name} {json.dumps(row, default=str)}", flush=True)
    device = "cuda" if cuda() else "cpu"
    res = {"device": rows[0].get("device", device) if rows and rows[0]["stage"] == "env" else device,
           "size": "full" if full else "toy", "date": time.strftime("%Y-%m-%d"),
           "wall_s": round(time.perf_counter() - t0, 1), "stages": rows, "not_built": ["loop"],
           "command": " ".join(["tools/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])}
    out = Path(args.out or RESULTS / f"gpu_check_{device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"gpu check: {sum(r['passed'] for r in rows)}/{len(rows)} stages passed in {res['wall_s']} s -> {out}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
