"""Helper of bench_router_r1.py: a bare ``vllm.LLM`` in its own process, the baseline of the rollout arm.

It builds the engine exactly as ``rlrouter.rollout.worker.RolloutWorker`` does on CPU (in-process engine,
fp32, eager, same seed, max_model_len and KV cache) but with no Ray and no rlrouter code on the
generation path, then answers commands read as JSON lines on stdin::

    {"op": "generate", "prompts": [...], "max_tokens": 64, "temperature": 1.0, "seed": 0}
    {"op": "quit"}

Each answer is one stdout line ``@@RESULT {json}`` (vLLM logs on the same stream, hence the marker),
timed around ``llm.generate`` alone. The first line is ``@@READY {json}`` once the engine is up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MARK_READY, MARK_RESULT = "@@READY ", "@@RESULT "


def emit(mark: str, obj: dict) -> None:
    sys.stdout.write(mark + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a local model folder (rlrouter.models.resolve_model)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-cache-gib", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    # the same engine mode the rollout worker uses on CPU (../shared/notes/vllm-cpu.md)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    import torch
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(model=args.model, dtype=args.dtype, seed=args.seed, max_model_len=args.max_model_len,
              enforce_eager=True, tensor_parallel_size=1)
    emit(MARK_READY, {"engine_start_s": time.perf_counter() - t0, "pid": os.getpid(),
                      "torch_threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                      "cpu_affinity": sorted(os.sched_getaffinity(0))})
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        sp = SamplingParams(max_tokens=cmd["max_tokens"], temperature=cmd["temperature"], seed=cmd["seed"])
        t0 = time.perf_counter()
        outs = llm.generate(cmd["prompts"], sp, use_tqdm=False)
        wall = time.perf_counter() - t0
        ids = [list(o.outputs[0].token_ids) for o in outs]
        emit(MARK_RESULT, {"wall_s": wall, "tokens": sum(len(x) for x in ids), "token_ids": ids})


if __name__ == "__main__":
    main()
