"""A synchronous HTTP client over an ASGI app in this process (httpx's ASGITransport).

Starlette's TestClient warns that its httpx use is deprecated (an error here): this is the
same idea with httpx alone. One event loop for the client's life, cookies kept between calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class AsgiClient:
    def __init__(self, app: Any, base_url: str = "http://testserver") -> None:
        self._loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        self._client = httpx.AsyncClient(transport=transport, base_url=base_url)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()
