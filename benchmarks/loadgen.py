"""Open-loop HTTP load generator for ``POST /route`` latency (benchmarks/bench_selector.py).

Runs in its own process, so its CPU never competes with the Ray driver's threads for the GIL. It
speaks HTTP/1.1 keep-alive over raw asyncio streams (with uvloop when present): a request is one
pre-built byte string and a response is parsed only as far as its status line and Content-Length.
That costs tens of microseconds per request, where httpx costs about a millisecond, which on a
2-core machine would otherwise be taken from the server being measured.

Open loop: request i leaves at ``start + i / rate`` whether or not earlier ones have returned (on
a free connection of at most ``--concurrency``; the wait for one counts in the latency, so a slow
server cannot hide behind a fixed pool). Prints one JSON object: latencies (ms), errors, achieved
rate, the first error seen, and the generator's own CPU share (CPU seconds per wall second) while
measuring.

    python benchmarks/loadgen.py --url http://127.0.0.1:8000/route --key k --rate 200 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlsplit


def build_request(host: str, port: int, path: str, key: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n")
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status code and body of one HTTP/1.1 response (Content-Length or chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = None
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if length is not None:
        return status, await reader.readexactly(length)
    if chunked:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                return status, body
    return status, b""


async def run(url: str, key: str, rate: float, duration: float, concurrency: int,
              warmup: float = 0.0) -> dict:
    u = urlsplit(url)
    host, port, path = u.hostname or "127.0.0.1", u.port or 80, u.path or "/"
    slots = asyncio.Semaphore(concurrency)  # at most `concurrency` requests (and connections) at once
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened = 0
    lat: list[float] = []
    errors = 0
    first_error: str | None = None

    async def exchange(req: bytes) -> tuple[int, bytes]:
        """One request on an idle keep-alive connection, or a new one; a connection the server closed
        while idle is replaced once (as browsers do), and that retry counts in the latency."""
        nonlocal opened
        for attempt in (0, 1):
            fresh = not idle
            if fresh:
                opened += 1
                conn = await asyncio.open_connection(host, port)
            else:
                conn = idle.pop()
            reader, writer = conn
            try:
                writer.write(req)
                status, data = await read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()
                if fresh or attempt:
                    raise
                continue
            idle.append(conn)
            return status, data
        raise AssertionError("unreachable")

    async def one(i: int, scheduled: float, record: bool) -> None:
        nonlocal errors, first_error
        body = json.dumps({"query": f"load test query {i}", "session_id": f"s{i % 50}"}).encode()
        req = build_request(host, port, path, key, body)
        ok = False
        async with slots:
            try:
                status, data = await asyncio.wait_for(exchange(req), 30.0)
                ok = status == 200
                if not ok and first_error is None:
                    first_error = f"{status}: {data[:200]!r}"
            except Exception as e:  # noqa: BLE001 - counted, and the first one reported
                if first_error is None:
                    first_error = f"{type(e).__name__}: {e}"
        if record:
            lat.append((time.perf_counter() - scheduled) * 1000)
            if not ok:
                errors += 1

    async def phase(seconds: float, record: bool) -> float:
        n = int(rate * seconds)
        tasks = []
        start = time.perf_counter()
        for i in range(n):
            at = start + i / rate
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, at, record)))
        await asyncio.gather(*tasks)
        return n / (time.perf_counter() - start)

    if warmup > 0:
        await phase(warmup, record=False)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    achieved = await phase(duration, record=True)
    # the generator's own CPU share while measuring: near 1.0 would mean it, not the server, is the limit
    cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    for _, writer in idle:
        writer.close()
    return {"latencies_ms": lat, "errors": errors, "achieved_rate_per_s": achieved, "first_error": first_error,
            "connections": opened, "loadgen_cpu_share": cpu_share}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    out = asyncio.run(run(args.url, args.key, args.rate, args.duration, args.concurrency, args.warmup))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
