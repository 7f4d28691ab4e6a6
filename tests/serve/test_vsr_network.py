"""VSR's Router-R1 client calling from another machine, over a real network link, without a key.

A network namespace stands for VSR's machine. A veth pair joins it to this host: 10.231.7.1/30 on the
host side, 10.231.7.2/30 inside. The app listens on 10.231.7.1 with
``serving.router_r1_keyless_networks: ["10.231.7.0/30"]``, as docs/serve.md's VSR section sets it up.

- VSR's exact request, sent from 10.231.7.2 inside the namespace, gets one of VSR's own models. The
  bytes are the ones Go's net/http writes for VSR's ``RouterR1Client``: it posts
  ``json.Marshal(map[string]string{"query": ...})`` with only Content-Type set.
- The curl line of docs/serve.md's recipe (step 4), run in the namespace, gets the same answer.
- Without a key, this host's loopback gets a 401 whose message names
  ``serving.router_r1_keyless_networks`` (the recipe's step 5 curl line). The host's own veth address
  lies inside the /30, so it is let in as well.

The app is what the Serve deployment ``SelectorIngress`` runs: ``serve.app.SelectorReplica`` built from
``AppConfig.load`` (``rlrouter.serving.app_config``), which installs the service behind ``rlrouter.serving.api.create_app()``.
uvicorn serves it here on 10.231.7.1, as Ray Serve's HTTP proxy does, with the same defaults for
X-Forwarded-For. It is not Serve's proxy because Serve's ``http_options.host`` is read once per cluster,
and the session's shared cluster already has Serve on 127.0.0.1.

Needs root for ``ip netns``. The test is skipped, saying why, when ``ip netns add`` is not permitted.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.helpers import ROOT

HOST_ADDR, NS_ADDR, NETWORK = "10.231.7.1", "10.231.7.2", "10.231.7.0/30"
KEY = "3f9b2c7e1a5d8f0b4c6e2a9d"
VSR_MODELS = {"qwen3-8b", "llama-3.1-70b"}
VSR_BYTES = b'{"query":"Task: math_decision\\nAvailable models: qwen3-8b, llama-3.1-70b"}'
SERVING = {"router_r1_keyless_networks": [NETWORK],
           "model_map": {"qwen3-8b": "smollm2-135m", "llama-3.1-70b": "mixtral-8x7b-instruct"}}


def go_request(host: str, port: int) -> bytes:
    """What Go's net/http writes for VSR's POST: Host, User-Agent, Content-Length, the headers VSR set,
    then the transport's Accept-Encoding."""
    return (f"POST /router_r1/route HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Length: {len(VSR_BYTES)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"
            ).encode() + VSR_BYTES


# Runs inside the namespace: writes the request from stdin to the socket as is, and prints the address it
# connected from, then the response (status line, headers, body of Content-Length bytes).
RAW_CLIENT = r"""
import re, socket, sys
request = sys.stdin.buffer.read()
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as s:
    s.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < n:
        body += s.recv(65536)
    sys.stdout.buffer.write(s.getsockname()[0].encode() + b"\n" + head + b"\r\n\r\n" + body)
"""


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def netns():
    """A namespace joined to this host by a veth pair; removing the namespace removes the pair."""
    pid = os.getpid()
    ns, host_if, ns_if = f"rlr-vsr-{pid}", f"rlrv{pid}h", f"rlrv{pid}n"
    try:
        added = ip("netns", "add", ns)
    except FileNotFoundError:
        pytest.skip("the `ip` command (iproute2) is not installed")
    if added.returncode != 0:
        pytest.skip(f"`ip netns add` is not permitted here (needs root or CAP_SYS_ADMIN): {added.stderr.strip()}")
    try:
        for cmd in (["link", "add", host_if, "type", "veth", "peer", "name", ns_if],
                    ["link", "set", ns_if, "netns", ns],
                    ["addr", "add", f"{HOST_ADDR}/30", "dev", host_if],
                    ["link", "set", host_if, "up"],
                    ["netns", "exec", ns, "ip", "addr", "add", f"{NS_ADDR}/30", "dev", ns_if],
                    ["netns", "exec", ns, "ip", "link", "set", ns_if, "up"]):
            r = ip(*cmd)
            assert r.returncode == 0, f"ip {' '.join(cmd)}: {r.stderr}"
        yield ns
    finally:
        ip("link", "del", host_if)  # absent once it is in a deleted namespace's pair: nothing to do then
        ip("netns", "del", ns)
        assert ns not in ip("netns", "list").stdout


@pytest.fixture(scope="module")
def base(netns, tmp_path_factory):
    """The app on HOST_ADDR (a free port), as the SelectorIngress replica serves it; yields its URL."""
    import uvicorn

    import serve.app as app_mod
    from rlrouter.serving.api import create_app
    from rlrouter.serving.app_config import AppConfig, AppParts

    mp = pytest.MonkeyPatch()
    mp.setenv("RLROUTER_API_KEYS", f"{KEY}=vsr-network")  # the key everyone but VSR needs
    try:  # build_app's steps, without binding it to Serve
        cfg, _ = AppConfig.load({"selector": {"storage_path": str(tmp_path_factory.mktemp("sel") / "state.json"),
                                              "seed": 0},
                                 "serving": SERVING}).with_keys()
    finally:
        mp.undo()
    replica = app_mod.SelectorReplica(cfg, AppParts())
    sock = socket.socket()
    sock.bind((HOST_ADDR, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and thread.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://{HOST_ADDR}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        replica.host.close()


def in_netns(netns: str, argv: list[str], stdin: bytes = b"") -> bytes:
    r = subprocess.run(["ip", "netns", "exec", netns, *argv], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def docs_curl_lines(base: str) -> dict[str, str]:
    """The curl lines of docs/serve.md's VSR recipe, with this test's port instead of 8000: 'vsr' (sent
    from VSR's machine) and 'loopback' (``--interface 127.0.0.1``, from this host)."""
    text = (ROOT / "docs" / "serve.md").read_text()
    section = text.split("#### Recipe: VSR on another machine", 1)[1].split("\n#### ", 1)[0]
    lines = [ln.strip() for ln in section.splitlines() if ln.strip().startswith("curl -")]
    assert len(lines) == 2 and all(ln.endswith(f"http://{HOST_ADDR}:8000/router_r1/route") for ln in lines), lines
    vsr, loopback = lines
    assert "--interface 127.0.0.1" in loopback and "--interface" not in vsr, lines
    return {"vsr": vsr.replace(f"http://{HOST_ADDR}:8000", base),
            "loopback": loopback.replace(f"http://{HOST_ADDR}:8000", base)}


WRITE_OUT = " -w '\\n%{http_code} %{local_ip}'"  # curl appends the status and the address it connected from


def test_vsr_exact_bytes_from_a_listed_network_without_a_key(netns, base):
    port = int(base.rsplit(":", 1)[1])
    out = in_netns(netns, [sys.executable, "-c", RAW_CLIENT, HOST_ADDR, str(port)], stdin=go_request(HOST_ADDR, port))
    source, _, response = out.partition(b"\n")
    assert source.decode() == NS_ADDR  # a non-loopback peer, from the other side of the link
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.split(b"\r\n", 1)[0] == b"HTTP/1.1 200 OK", response
    answer = json.loads(body)
    assert answer["selected_model"] in VSR_MODELS and answer["backend"] == "selector", answer

    # docs/serve.md's curl line, run where VSR runs
    line = docs_curl_lines(base)["vsr"]
    assert shlex.split(line)[shlex.split(line).index("--data-binary") + 1].encode() == VSR_BYTES
    body, _, status = in_netns(netns, ["sh", "-c", line + WRITE_OUT]).decode().rpartition("\n")
    assert status == f"200 {NS_ADDR}", (status, body)
    assert json.loads(body)["selected_model"] in VSR_MODELS, body


def test_loopback_without_a_key_is_refused_naming_the_setting(base):
    line = docs_curl_lines(base)["loopback"]
    r = subprocess.run(["sh", "-c", line + WRITE_OUT], capture_output=True, text=True, timeout=60)
    body, _, status = r.stdout.rpartition("\n")
    assert r.returncode == 0 and status == "401 127.0.0.1", (r.stdout, r.stderr)
    msg = json.loads(body)["error"]["message"]
    assert "client address 127.0.0.1 is not in serving.router_r1_keyless_networks" in msg, msg
    headers = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=30) as loopback:
        r = loopback.post(f"{base}/router_r1/route", content=VSR_BYTES, headers={**headers, "X-API-Key": KEY})
        assert r.status_code == 200 and r.json()["selected_model"] in VSR_MODELS, r.text  # with a key: in
    # a client on this host that connects from its own end of the link is inside the /30 too
    r = httpx.post(f"{base}/router_r1/route", content=VSR_BYTES, headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["selected_model"] in VSR_MODELS, r.text
