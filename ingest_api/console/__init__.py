"""The web console at ``/ui``: static pages whose JavaScript calls the public ``/v1`` API from the browser.

The server holds no console state but the stats time series
(:mod:`ingest_api.console.stats`); the pages are plain files, so with security
on they load without a key and the browser sends the key the user enters with
each API call, behind the same ACLs as any client.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC", "mount_console"]

STATIC = Path(__file__).parent / "static"
"""The console's files; ``static/vendor/`` is build output of ``make console`` (the charting library)."""


def mount_console(app: FastAPI) -> None:
    """Serve the console at ``/ui/`` (``/ui`` redirects there)."""

    @app.get("/ui", include_in_schema=False)
    async def ui() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.mount("/ui/", StaticFiles(directory=STATIC, html=True), name="console")
