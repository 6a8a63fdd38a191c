"""Shared test fixtures.

The installed openai/anthropic SDKs send HTTP through ``httpx2``; respx only patches ``httpx`` by
itself, so this registers a respx mocker for httpx2 (once, for every test module) that routes the
SDKs' traffic through respx's routes. With SDKs built on httpx, respx's own mocker applies.
"""

from __future__ import annotations

import importlib
from typing import ClassVar

import httpx
import pytest
from respx.mocks import Mocker

try:
    import httpx2

    class _HTTPX2Mocker(Mocker):
        name = "httpx2"
        targets: ClassVar[list[str]] = ["httpx2._client.Client"]
        target_methods: ClassVar[list[str]] = ["_transport_for_url"]

        @classmethod
        def mock(cls, spec):
            def _transport_for_url(self, *args, **kwargs):
                return httpx2.MockTransport(cls._handle)

            return _transport_for_url

        @classmethod
        def _handle(cls, request2):
            request = httpx.Request(request2.method, str(request2.url),
                                    headers=list(request2.headers.raw), content=request2.read())
            try:
                response = cls.handler(request)
            except httpx.TimeoutException as exc:
                raise httpx2.ReadTimeout(str(exc), request=request2) from exc
            except httpx.ConnectError as exc:
                raise httpx2.ConnectError(str(exc), request=request2) from exc
            return httpx2.Response(response.status_code, headers=list(response.headers.raw),
                                   content=response.read(), request=request2)
except ImportError:  # pragma: no cover - SDKs built on httpx
    pass


def sdk_http_library(sdk: str) -> str:
    base = importlib.import_module(f"{sdk}._base_client")
    return "httpx2" if hasattr(base, "httpx2") else "httpx"


@pytest.fixture
def respx_using() -> str:
    """The respx mocker name that intercepts both SDKs' HTTP traffic."""
    using = {sdk_http_library("openai"), sdk_http_library("anthropic")}
    assert len(using) == 1, "both SDKs are expected on the same HTTP library"
    return using.pop()


@pytest.fixture(autouse=True)
def isolated_response_cache(tmp_path, monkeypatch):
    """Every test gets its own LLM response cache: no test sees another's (or a user's) replies."""
    monkeypatch.setenv("SPARQL_RESEARCHER_CACHE", str(tmp_path / "llm-cache.sqlite"))
