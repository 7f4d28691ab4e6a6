"""Which address a request comes from, for the keyless network check of ``/router_r1/route``.

The address that counts is the TCP peer's. Behind proxies listed in ``serving.trusted_proxies`` it is
the client they forwarded for: ``X-Forwarded-For`` read from the right (each proxy appends the address
it saw), skipping the trusted proxies; what a client wrote itself to the left of that counts for nothing.

The app does not see the TCP peer directly when the request carries ``X-Forwarded-For``. Ray Serve
runs the app under uvicorn (in its HTTP proxy and in direct ingress), whose ProxyHeadersMiddleware
replaces the peer by an address taken from that header whenever the peer is one of uvicorn's
``forwarded_allow_ips`` (``FORWARDED_ALLOW_IPS``, default ``127.0.0.1,::1``). So a client address
that appears in the header may be the header's and not the peer's: the peer was then one of those
addresses, and it counts as a proxy only when ``serving.trusted_proxies`` covers all of them.
"""

from __future__ import annotations

import ipaddress
import os

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# uvicorn.config.Config: forwarded_allow_ips defaults to this variable, else to loopback
UVICORN_FORWARDED_ALLOW_IPS = ("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")


def server_forwarded_allow_ips() -> list[str]:
    """The peers whose ``X-Forwarded-For`` the HTTP server in front (uvicorn) has already applied."""
    name, default = UVICORN_FORWARDED_ALLOW_IPS
    return [h.strip() for h in os.environ.get(name, default).split(",") if h.strip()]


def host_of(entry: str) -> str:
    """``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80`` or ``::1`` -> the host part."""
    entry = entry.strip()
    if entry.startswith("[") and "]" in entry:
        return entry[1:entry.index("]")]
    if entry.count(":") == 1:
        return entry.partition(":")[0]
    return entry


def in_networks(host: str, networks: list[Network]) -> bool:
    """Whether ``host`` (an address, or a network written in CIDR) lies inside one of ``networks``."""
    try:
        net = ipaddress.ip_network(host, strict=False)
    except ValueError:
        return False
    return any(net.version == n.version and net.subnet_of(n) for n in networks)


def client_address(reported: str | None, forwarded_for: list[str], trusted_proxies: list[Network],
                   server_trusted: list[str] | None = None) -> str | None:
    """The address the keyless check judges; None when it cannot be known.

    ``reported``: the client host the app was given (``request.client.host``); ``forwarded_for``: the
    ``X-Forwarded-For`` header values, in order; ``server_trusted``: the HTTP server's own trusted
    peers (default: :func:`server_forwarded_allow_ips`).
    """
    hops = [host_of(h) for value in forwarded_for for h in value.split(",") if h.strip()]  # client ... last proxy
    if not hops:
        return reported  # no header: nothing can have replaced the TCP peer
    if reported is None:
        return None
    if reported in hops:
        # possibly replaced by the server from the header: the peer was one of the server's trusted peers
        peers = server_trusted if server_trusted is not None else server_forwarded_allow_ips()
        peer_is_proxy = bool(peers) and "*" not in peers and all(in_networks(p, trusted_proxies) for p in peers)
        if not peer_is_proxy:
            return None  # some address the server trusts, which one is unknown
    elif not in_networks(reported, trusted_proxies):
        return reported  # a direct client: its own header counts for nothing
    for hop in reversed(hops):
        if not in_networks(hop, trusted_proxies):
            return hop
    return hops[0]  # every hop is a trusted proxy: the first one is the client
