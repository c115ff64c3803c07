"""kbdebug serve in a real browser: headless Chromium, driven over the DevTools protocol, opens
the served page, the app's first screen arrives with its header, and a key press steps."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from kbdebug.cli import main
from kbdebug.commands.replay import bundled_trace

aiohttp = pytest.importorskip("aiohttp", reason="needs the serve extra (aiohttp comes with it)")
pytest.importorskip("textual_serve", reason="needs the serve extra")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Where the test keeps the browser's screenshot of the app (named in its output).
SCREENSHOT = Path(tempfile.gettempdir()) / "kbdebug-serve-browser.png"
#: The header's position: "event start of 3,472" before any step, "event #0 of 3,472" after.
HEADER_EVENT = re.compile(r"event (\S+) of [\d,]+")
#: Control sequences of the app's output (CSI, OSC, and two-byte escapes).
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
#: A ceiling for the whole browser test (it takes some 8 s), for a machine under load.
DEADLINE = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, until: float) -> None:
    while time.monotonic() < until:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


def stop(process: subprocess.Popen) -> None:
    """End a process group this test started (the server's app sessions, chromium's helpers)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class DevTools:
    """Commands to one page over the Chrome DevTools protocol, and the app's screen text
    gathered from the WebSocket frames the page receives."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.screen = ""  # every frame the app sent, its control sequences removed

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            reply = await self.receive()
            if reply.get("id") == ident:
                assert "error" not in reply, reply
                return reply.get("result", {})

    async def receive(self) -> dict:
        message = json.loads((await self.ws.receive(timeout=DEADLINE)).data)
        if message.get("method") == "Network.webSocketFrameReceived":
            frame = message["params"]["response"]
            data = frame["payloadData"]
            if frame.get("opcode") == 2:
                data = base64.b64decode(data).decode("utf-8", "replace")
            self.screen += ESCAPES.sub("", data)
        return message

    async def wait_for(self, found, until: float):
        """Read events until ``found(self.screen)`` is true; what it returned."""
        while time.monotonic() < until:
            hit = found(self.screen)
            if hit:
                return hit
            try:
                await asyncio.wait_for(self.receive(), max(0.05, until - time.monotonic()))
            except TimeoutError:
                break
        raise AssertionError(f"not on the screen; its last text: {self.screen[-1500:]!r}")

    async def press(self, key: str) -> None:
        code = f"Key{key.upper()}"
        vk = ord(key.upper())
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key,
                        windowsVirtualKeyCode=vk)  # fmt: skip
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code,
                        windowsVirtualKeyCode=vk)  # fmt: skip


async def drive(page_ws: str, url: str, until: float) -> tuple[str, str]:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(page_ws, max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Network.enable")
            await tools.call("Page.enable")
            await tools.call("Page.navigate", url=url)

            def header(text: str):
                return "kbdebug" in text and HEADER_EVENT.search(text)

            first = (await tools.wait_for(header, until)).group(1)
            # The terminal takes keys once xterm's input box has the focus.
            await tools.call(
                "Runtime.evaluate",
                expression="document.querySelector('.xterm-helper-textarea').focus()",
            )
            shot = await tools.call("Page.captureScreenshot", format="png")
            SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))
            seen = len(tools.screen)
            await tools.press("n")

            def stepped(text: str):
                events = [m.group(1) for m in HEADER_EVENT.finditer(text[seen:])]
                return next((e for e in events if e != first), None)

            return first, await tools.wait_for(stepped, until)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt install chromium)")
def test_the_served_app_renders_in_chromium_and_steps_on_a_key(tmp_path):
    until = time.monotonic() + DEADLINE
    port, debug_port = free_port(), free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "kbdebug", "serve", str(bundled_trace()), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    chrome = None
    try:
        wait_for_port(port, until)
        chrome = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             f"--remote-debugging-port={debug_port}", "--window-size=1280,720", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json/list") as r:
                    targets = json.load(r)
                break
            except OSError:
                assert time.monotonic() < until, "chromium's DevTools never answered"
                time.sleep(0.1)
        page = next(t for t in targets if t["type"] == "page")
        first, after = asyncio.run(
            drive(page["webSocketDebuggerUrl"], f"http://localhost:{port}/", until)
        )
        assert first == "start"  # the app opens paused before the first event
        assert after == "#0"  # n: the kernel's first tl call
        assert SCREENSHOT.stat().st_size > 10_000
        print(f"screenshot: {SCREENSHOT}")
    finally:
        if chrome is not None:
            stop(chrome)
        stop(serve)
    assert b"serving " in serve.stdout.read()


def test_serve_refuses_a_bad_trace_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.kbt"
    bad.write_bytes(b"not a trace")
    assert main(["serve", str(bad), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.kbt" in err[0]


def test_serve_without_the_extra_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    assert main(["serve", str(bundled_trace())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'kbdebug[serve]'" in err[0]


def test_serve_refuses_a_port_already_taken_in_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(bundled_trace()), "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert "serving" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on localhost:{port}" in lines[0]
