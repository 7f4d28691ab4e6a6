"""The learner's log-prob and entropy pass, measured: bytes per logits element it adds, forward and backward,
beyond the bf16 logits, for the chunked path the learner runs and the plain autograd path it replaced, at
Qwen2.5's vocabulary (151,936). Each measurement runs in a fresh process (its peak resident memory:
``rlrouter.learner.memory.measure_logits_bytes``); ``learner_memory_gib`` must hold what it finds.

    .venv/bin/python benchmarks/bench_logits_memory.py            # about 2 minutes on 2 cores

Results: ``benchmarks/results/logits_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rlrouter.algos.common import LOGITS_CHUNK  # noqa: E402 - needs ROOT on the path
from rlrouter.learner.memory import CHUNK_BYTES, LOGITS_BYTES  # noqa: E402

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_logits_memory.py", "rlrouter/algos", "rlrouter/learner/memory.py")

RESULTS = ROOT / "benchmarks" / "results"
VOCAB = 151_936
RUNS = [("plain", 512), ("plain", 1024), ("chunked", 512), ("chunked", 1024), ("chunked", 2048)]


def measure(path: str, window: int, vocab: int = VOCAB) -> dict:
    code = ("import json; from rlrouter.learner.memory import measure_logits_bytes; "
            f"print(json.dumps(measure_logits_bytes({path!r}, 1, {window}, {vocab}, entropy_grad=True)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=ROOT,
                       env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"})
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "logits_memory.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    for path, window in RUNS:
        m = measure(path, window)
        if path == "chunked":  # what learner_memory_gib charges beyond the logits, per element of the window
            m["arithmetic_bytes_per_element"] = (LOGITS_BYTES - 2) + CHUNK_BYTES * min(LOGITS_CHUNK, window) / window
        rows.append(m)
        print(json.dumps(m))
    res = {"vocab": VOCAB, "chunk": LOGITS_CHUNK, "logits_bytes": LOGITS_BYTES, "chunk_bytes": CHUNK_BYTES,
           "runs": rows, "wall_s": round(time.perf_counter() - t0, 1),
           "command": "benchmarks/bench_logits_memory.py"}
    write_result(Path(args.out), res, MEASURES, indent=2)


if __name__ == "__main__":
    main()
