"""A real headless Chromium (Debian's chromium package, installed by deploy/setup.sh) driven through the
Chrome DevTools Protocol over a pipe (``--remote-debugging-pipe``: JSON messages ended by NUL on file
descriptors 3 and 4), so that the tests need no WebDriver and no extra Python package.

``Page.open(path)`` loads a file and records what a reader of the report would meet: console messages,
uncaught exceptions, log entries and every network request the page makes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


@dataclass
class Events:
    console: list[tuple[str, str]] = field(default_factory=list)  # (type, text)
    exceptions: list[str] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    requests: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return ([f"console.{kind}: {text}" for kind, text in self.console if kind in ("error", "assert")]
                + [f"exception: {text}" for text in self.exceptions]
                + [f"log {level}: {text}" for level, text in self.log if level == "error"])

    def network(self) -> list[str]:
        """Requests for anything but the page itself and inline data."""
        return [url for url in self.requests if not url.startswith(("file:", "data:", "about:"))]


class Browser:
    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        executable = chromium()
        if executable is None:
            raise BrowserError("chromium is not installed (deploy/setup.sh installs it)")
        self._profile = tempfile.mkdtemp(prefix="perfctl-chromium-")
        self._timeout = timeout
        self._next = 0
        self._buffer = b""
        self._pending: list[dict] = []
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        def protocol_fds() -> None:  # fds 3 and 4 of the child are the protocol's (kept open: pass_fds)
            read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)  # either may be 3 or 4 now
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self._process = subprocess.Popen(
            [executable, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
             "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={self._profile}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=protocol_fds, pass_fds=(3, 4), start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.width, self.height = width, height

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._pending.append(reply)

    def events(self) -> list[dict]:
        out, self._pending = self._pending, []
        return out

    def wait_for(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self._timeout)
        while True:
            for i, event in enumerate(self._pending):
                if event.get("method") == method:
                    return self._pending.pop(i)
            if time.monotonic() > deadline:
                raise BrowserError(f"no {method} within the timeout")
            self._pending.append(self._read(deadline))

    def _read(self, deadline: float | None = None) -> dict:
        import select

        deadline = deadline or time.monotonic() + self._timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError("chromium did not answer within the timeout")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium exited ({self._process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, path: str) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=session)
        # the viewport exactly as asked: a headless window is never narrower than 500 pixels, a phone is
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False}, session=session)
        self.send("Page.navigate", {"url": "file://" + os.path.abspath(path)}, session=session)
        self.wait_for("Page.loadEventFired")
        page.collect()
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except BrowserError:
            pass
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, 9)
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    def __init__(self, browser: Browser, session: str):
        self._browser = browser
        self._session = session
        self.events = Events()

    def collect(self) -> None:
        """File what the page reported so far into ``events``."""
        for event in self._browser.events():
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.events.console.append((params.get("type", ""), text))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                self.events.exceptions.append(details.get("exception", {}).get("description") or details.get("text"))
            elif method == "Log.entryAdded":
                entry = params.get("entry", {})
                self.events.log.append((entry.get("level", ""), entry.get("text", "")))
            elif method == "Network.requestWillBeSent":
                self.events.requests.append(params.get("request", {}).get("url", ""))

    def evaluate(self, expression: str):
        result = self._browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                         "awaitPromise": True}, session=self._session)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:60]}: {result['exceptionDetails'].get('text')}")
        self.collect()
        return result["result"].get("value")

    def screenshot(self, path: str, full_page: bool = True) -> None:
        params = {"format": "png"}
        if full_page:
            height = int(self.evaluate("document.documentElement.scrollHeight"))
            self._browser.send("Emulation.setDeviceMetricsOverride",
                               {"width": self._browser.width, "height": min(height, 16000), "deviceScaleFactor": 1,
                                "mobile": False}, session=self._session)
            # two frames: the parts laid out only near the window (content-visibility) are drawn before the shot
            self.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        data = self._browser.send("Page.captureScreenshot", params, session=self._session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        self.collect()


def measured_builds(directory, sides: dict, warmup: int) -> dict:
    """Each side's benchmarks ({side: [(name, [program in examples/bin, args...])]}) measured with `perfctl
    stat` (8 runs after ``warmup``) into DIRECTORY/SIDE.jsonl: the two builds a report is drawn from."""
    from pathlib import Path

    from conftest import perfctl

    programs = Path(__file__).resolve().parents[1] / "examples" / "bin"
    files = {}
    for side, benchmarks in sides.items():
        path = Path(directory) / f"{side}.jsonl"
        for name, (program, *args) in benchmarks:
            done = perfctl("stat", "-q", "-r", "8", "--warmup", str(warmup), "--name", name, "-o", str(path), "--",
                           str(programs / program), *args)
            assert done.returncode == 0, done.stderr
        files[side] = path
    return files
