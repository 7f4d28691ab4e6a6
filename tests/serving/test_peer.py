"""The address the keyless check judges, for each way a request can reach the app."""

import ipaddress

import pytest

from rlrouter.serving.config import ServingConfig, ServingConfigError
from rlrouter.serving.peer import client_address

LOOPBACK = ["127.0.0.1", "::1"]  # uvicorn's forwarded_allow_ips by default


def nets(*cidrs):
    return [ipaddress.ip_network(c) for c in cidrs]


def test_without_a_header_the_tcp_peer_counts():
    assert client_address("10.1.2.3", [], nets("192.0.2.0/24"), LOOPBACK) == "10.1.2.3"
    assert client_address(None, [], [], LOOPBACK) is None


def test_a_header_nobody_vouches_for_gives_no_address():
    # uvicorn replaced a loopback peer by the header's address: the app cannot tell which peer it was
    assert client_address("10.1.2.3", ["10.1.2.3"], [], LOOPBACK) is None
    # the peer could only have been a loopback address, and not every loopback address is a trusted proxy
    assert client_address("10.1.2.3", ["10.1.2.3"], nets("127.0.0.1/32"), LOOPBACK) is None
    # a server that trusts every peer's header ('*'): nothing is known
    assert client_address("10.1.2.3", ["10.1.2.3"], nets("0.0.0.0/0", "::/0"), ["*"]) is None


def test_a_direct_client_header_counts_for_nothing():
    # not replaced (the peer is not in the header): the peer is the client, whatever it wrote
    assert client_address("192.0.2.7", ["10.1.2.3"], [], LOOPBACK) == "192.0.2.7"


def test_behind_trusted_proxies_the_header_is_read_from_the_right():
    proxies = nets("127.0.0.2/32", "10.0.0.5/32")
    assert client_address("127.0.0.2", ["10.1.2.3"], proxies, LOOPBACK) == "10.1.2.3"
    # the client wrote 10.1.2.3 itself; the proxy appended the address it saw
    assert client_address("127.0.0.2", ["10.1.2.3, 192.0.2.7"], proxies, LOOPBACK) == "192.0.2.7"
    # two proxies in a row, the header over two lines, a port on an entry
    assert client_address("127.0.0.2", ["192.0.2.7:5000", "10.0.0.5"], proxies, LOOPBACK) == "192.0.2.7"
    assert client_address("127.0.0.2", ["10.0.0.5"], proxies, LOOPBACK) == "10.0.0.5"  # all trusted: the first
    # uvicorn already replaced a loopback peer, and every loopback address is a trusted proxy
    assert client_address("10.1.2.3", ["10.1.2.3"], nets("127.0.0.0/8", "::1/128"), LOOPBACK) == "10.1.2.3"


def test_config_fields_are_checked_naming_them():
    with pytest.raises(ServingConfigError, match=r"'trusted_proxies\[0\]'.*not a CIDR"):
        ServingConfig(trusted_proxies=["proxy.local"])
    with pytest.raises(ServingConfigError, match="'openai_user'"):
        ServingConfig(openai_user="identity")
    cfg = ServingConfig(router_r1_keyless_networks=["10.0.0.0/8"], trusted_proxies=["127.0.0.2/32"])
    assert cfg.keyless(cfg.client_address("127.0.0.2", ["10.1.2.3"]))
    assert not cfg.keyless(cfg.client_address("127.0.0.1", ["10.1.2.3"]))
