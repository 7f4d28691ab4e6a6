"""Fixtures of the pool tests: a real OpenAI-compatible HTTP server on 127.0.0.1 and the RouteLLM table."""

from __future__ import annotations

import httpx
import pytest

from .openai_server import ServerThread, make_app


@pytest.fixture(scope="module")
def openai_server():
    """A live server (see openai_server.py); its counters are reset before each use by ``server_url``."""
    srv = ServerThread(make_app()).start()
    yield srv
    srv.stop()


@pytest.fixture
def server_url(openai_server) -> str:
    httpx.post(f"{openai_server.url}/reset").raise_for_status()
    return openai_server.url


@pytest.fixture(scope="module")
def keyed_server():
    """The same server, but it demands ``Authorization: Bearer sk-test-123``."""
    srv = ServerThread(make_app(api_key="sk-test-123")).start()
    yield srv
    srv.stop()


def stats(url: str) -> dict:
    return httpx.get(f"{url}/stats").json()


@pytest.fixture(scope="session")
def routellm_table(shared_data):
    from rlrouter.pool.replay import shared_table

    return shared_table(str(shared_data / "routellm"))
