"""Headless Chromium driven over the Chrome DevTools Protocol (a websocket, JSON messages)."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect


class Browser:
    """One headless Chromium with one page. ``evaluate`` runs JavaScript and returns its value."""

    def __init__(self, binary: str, profile: Path, port: int) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking",
             f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={profile}", "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._ids = itertools.count(1)
        self.ws: ClientConnection = connect(self._page_ws(port), max_size=64 << 20)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _page_ws(self, port: int) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited {self.proc.returncode}")
            try:
                pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=1).json()
                page = next(p for p in pages if p.get("type") == "page")
                return page["webSocketDebuggerUrl"]
            except (httpx.HTTPError, StopIteration, ValueError):
                time.sleep(0.2)
        raise RuntimeError("chromium's DevTools endpoint did not come up in 30 s")

    def call(self, method: str, **params: Any) -> dict:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:  # events arrive in between; the reply carries our id
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as e:  # e.g. the page is still loading: its elements missing
                last, value = e, None
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"not true within {timeout_s:g} s: {expression} ({last})")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
