"""The notebook client keeps its token home (issue 44): two real HTTP servers on
127.0.0.1, one playing the lab's API and one an attacker that records every connection
and every request's headers. A redirect or a next page pointing anywhere but the lab's
origin (scheme, host, port) is refused with :class:`OriginRefused` naming both origins,
and the attacker sees not even a connection; within the origin, redirects are followed
with the token; only http and https are spoken, from the lab's URL on."""

from __future__ import annotations

import json
import threading
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any

import pytest
from mutual_rl_lab_client import Lab, LabError, OriginRefused
from mutual_rl_lab_client.origin import origin_of, stays_within
from mutual_rl_lab_client.transport import Transport, lab_opener

TOKEN = "mrlp_secret-of-the-researcher"


@dataclass
class Seen:
    """One request a server got: its path and headers (names in lower case)."""

    path: str
    headers: dict[str, str]


class Recorder(BaseHTTPRequestHandler):
    server: LocalServer

    def do_GET(self) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.seen.append(Seen(self.path, headers))
        self.server.answer(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def reply_json(self, body: object, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def redirect(self, location: str, status: int = 302) -> None:
        self.send_response(status)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


def runs_page(ids: list[int], next_url: str | None = None) -> dict[str, Any]:
    return {"runs": [{"id": i, "config": {}, "metrics": {}} for i in ids], "next": next_url}


class LocalServer(ThreadingHTTPServer):
    """A server on 127.0.0.1 (a free port) answering each GET with ``answer``; counts
    the connections it accepts, even those that never make a request (TLS, FTP)."""

    daemon_threads = True

    def __init__(self, answer: Callable[[Recorder], None]) -> None:
        super().__init__(("127.0.0.1", 0), Recorder)
        self.answer = answer
        self.seen: list[Seen] = []
        self.connections = 0

    def process_request(self, request: socket | tuple[bytes, socket], client: Any) -> None:
        self.connections += 1
        super().process_request(request, client)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def served(answer: Callable[[Recorder], None]) -> Iterator[LocalServer]:
    server = LocalServer(answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def api() -> Iterator[LocalServer]:
    """The lab's API; each test sets its ``answer``."""
    yield from served(lambda handler: handler.reply_json({"error": "no route"}, 404))


@pytest.fixture
def attacker() -> Iterator[LocalServer]:
    """Another server, answering a runs page of its own to whatever reaches it."""
    yield from served(lambda handler: handler.reply_json(runs_page([666])))


def lab_of(api: LocalServer) -> Lab:
    return Lab(api.origin, token=TOKEN, retries=0, timeout=3)


def failure_of(call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised (None if it returned), so that a test can first assert what
    the attacker saw, then the error."""
    try:
        call()
    except (LabError, ValueError, OSError) as error:  # what old clients raised, too
        return error
    return None


def assert_untouched(server: LocalServer) -> None:
    assert server.seen == [], f"the other server got {server.seen}"
    assert server.connections == 0, "the other server was connected to"


def assert_refused(failure: BaseException | None, target: str, lab: str) -> OriginRefused:
    assert isinstance(failure, OriginRefused), repr(failure)
    assert failure.target.startswith(target) and failure.lab_origin == lab
    text = str(failure)
    assert target in text and lab in text and "token" in text
    return failure


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_port_is_refused_and_the_other_server_sees_nothing(
    api: LocalServer, attacker: LocalServer, status: int
) -> None:
    api.answer = lambda handler: handler.redirect(f"{attacker.origin}/collect", status)
    failure = failure_of(lab_of(api).run_records)
    assert_untouched(attacker)
    refused = assert_refused(failure, attacker.origin, api.origin)
    assert f"{status} redirect" in str(refused) and isinstance(refused, LabError)
    (asked,) = api.seen
    assert asked.headers["authorization"] == f"Bearer {TOKEN}"  # the lab itself had it


@pytest.mark.parametrize(
    ("location", "target"),
    [
        ("//127.0.0.1:{port}/collect", "http://127.0.0.1:{port}"),
        ("ftp://127.0.0.1:{port}/collect", "ftp://127.0.0.1:{port} (not an http"),
        ("file:///etc/hostname", "file:// (not an http"),
    ],
)
def test_a_redirect_to_a_scheme_relative_ftp_or_file_url_is_refused(
    api: LocalServer, attacker: LocalServer, location: str, target: str
) -> None:
    api.answer = lambda handler: handler.redirect(location.format(port=attacker.port))
    failure = failure_of(lab_of(api).run_records)
    assert_untouched(attacker)
    assert_refused(failure, target.format(port=attacker.port), api.origin)


def test_a_redirect_within_the_origin_is_followed_with_the_token(api: LocalServer) -> None:
    """A relative Location, then an absolute one in other case: the lab's own origin."""

    def answer(handler: Recorder) -> None:
        if handler.path.startswith("/api/v1/runs?"):
            handler.redirect("/api/v1/moved?hop=1", 301)
        elif handler.path == "/api/v1/moved?hop=1":
            handler.redirect(f"HTTP://127.0.0.1:{api.port}/api/v1/final", 307)
        else:
            handler.reply_json(runs_page([3, 2]))

    api.answer = answer
    assert [run["id"] for run in lab_of(api).run_records()] == [3, 2]
    assert [seen.path.split("?")[0] for seen in api.seen] == [
        "/api/v1/runs",
        "/api/v1/moved",
        "/api/v1/final",
    ]
    assert all(seen.headers["authorization"] == f"Bearer {TOKEN}" for seen in api.seen)


def test_a_forged_next_page_on_another_server_is_refused_before_any_request(
    api: LocalServer, attacker: LocalServer
) -> None:
    forged = f"{attacker.origin}/api/v1/runs?cursor=abc"
    api.answer = lambda handler: handler.reply_json(runs_page([2, 1], forged))
    lab = lab_of(api)
    pages = lab.iter_runs()
    assert [next(pages)["id"], next(pages)["id"]] == [2, 1]  # the lab's own page is read
    failure = failure_of(lambda: next(pages))
    assert_untouched(attacker)
    refused = assert_refused(failure, attacker.origin, api.origin)
    assert "next page" in str(refused) and forged in str(refused)
    assert len(api.seen) == 1


@pytest.mark.parametrize(
    ("forged", "target"),
    [
        ("ftp://127.0.0.1:{port}/api/v1/runs", "ftp://127.0.0.1:{port} (not an http"),
        ("file:///etc/hostname", "file:// (not an http"),
        ('data:application/json,{{"runs":[],"next":null}}', "data:"),
        ("//127.0.0.1:{port}/api/v1/runs?cursor=abc", "http://127.0.0.1:{port}"),
    ],
)
def test_a_next_page_of_another_scheme_or_scheme_relative_is_refused(
    api: LocalServer, attacker: LocalServer, forged: str, target: str
) -> None:
    next_url = forged.format(port=attacker.port)
    api.answer = lambda handler: handler.reply_json(runs_page([1], next_url))
    failure = failure_of(lab_of(api).run_records)
    assert_untouched(attacker)
    assert_refused(failure, target.format(port=attacker.port), api.origin)


def test_a_redirect_to_another_host_name_on_the_same_port_is_refused(api: LocalServer) -> None:
    """``localhost`` reaches the same socket as ``127.0.0.1`` but is another origin (as
    a proxy's or a load balancer's other name would be): the token is not sent to it."""
    elsewhere = f"http://localhost:{api.port}"

    def answer(handler: Recorder) -> None:
        if handler.headers["Host"].startswith("localhost"):
            handler.reply_json(runs_page([666]))
        else:
            handler.redirect(f"{elsewhere}/api/v1/runs")

    api.answer = answer
    failure = failure_of(lab_of(api).run_records)
    assert [seen.headers["host"] for seen in api.seen] == [f"127.0.0.1:{api.port}"]
    assert api.connections == 1
    assert_refused(failure, elsewhere, api.origin)


def test_an_http_to_https_hop_on_another_name_is_refused(
    api: LocalServer, attacker: LocalServer
) -> None:
    elsewhere = f"https://localhost:{attacker.port}"
    api.answer = lambda handler: handler.redirect(f"{elsewhere}/api/v1/runs?limit=1000")
    failure = failure_of(lab_of(api).run_records)
    assert_untouched(attacker)  # not even a TLS handshake
    assert_refused(failure, elsewhere, api.origin)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1:2121/",
        "file:///srv/lab",
        "data:text/plain,lab",
        "127.0.0.1:8000",  # no scheme: "127.0.0.1" would be taken for one
        "lab.example:8000",
        "//lab.example",
        "http://",
        "http://researcher@lab.example",
    ],
)
def test_a_lab_url_that_is_not_http_or_https_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError, match=r"lab's URL .* is refused: .*http://host:port"):
        Lab(url, token=TOKEN)


def test_the_opener_cannot_read_ftp_file_or_data_urls(
    attacker: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the checks, the real opener has no handler for another scheme, even with an
    ``ftp_proxy`` in the environment: a bug in the checks could not reach one."""
    default = Lab(attacker.origin, token=TOKEN).transport._open
    monkeypatch.setenv("ftp_proxy", attacker.origin)
    monkeypatch.setenv("file_proxy", attacker.origin)
    with_proxies = lab_opener(origin_of(attacker.origin)).open
    for url in (
        f"ftp://127.0.0.1:{attacker.port}/x",
        "file:///etc/hostname",
        "data:application/json,{}",
    ):
        for open_url in (default, with_proxies):
            with pytest.raises(urllib.error.URLError, match="unknown url type"):
                open_url(url, timeout=3)
    assert_untouched(attacker)


def test_a_test_opener_is_not_called_for_a_url_of_another_origin() -> None:
    """The ``opener=`` seam of the unit tests sits behind the same check."""
    asked: list[object] = []
    transport = Transport("http://lab.test", TOKEN, opener=lambda *args, **kw: asked.append(args))
    with pytest.raises(OriginRefused, match=r"http://evil\.test, not to the lab's .*lab\.test"):
        transport.get_url("http://evil.test/api/v1/runs")
    assert asked == []


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("HTTP://Lab.Example:80/x", "http://lab.example", True),
        ("https://lab.example:443/api/v1", "https://LAB.example/", True),
        ("http://[::1]:8000/", "http://[::1]:8000/api", True),
        ("http://lab.example", "https://lab.example", False),
        ("http://lab.example:443", "https://lab.example", False),
        ("http://lab.example", "http://lab.example:8080", False),
        ("http://lab.example", "http://lab.example.", False),
        ("http://lab.example", "http://lab.example@evil.example", False),
        ("http://lab.example", "http://evil.example\\@lab.example", False),
        ("http://lab.example", "ftp://lab.example:80", False),
    ],
)
def test_origins_compare_normalised(one: str, other: str, same: bool) -> None:
    assert stays_within(other, origin_of(one)) is same
