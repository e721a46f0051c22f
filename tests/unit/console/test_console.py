"""The console without a broker: routing, access, CSRF, read-only, error pages, charts, parameters.

The pages read an empty state directory and a bootstrap address where nothing listens, so
every page must still answer, with one line saying what it could not read.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from engine import config
from engine.config import Settings, load_settings, route_client_logs
from engine.console.app import create_app
from engine.console.charts import bucket_labels, histogram_counts, share_svg
from engine.console.params import labels, time_us
from engine.console.security import CSRF_COOKIE, ConsoleAccess, caller, csrf_ok, is_loopback, requested_by
from engine.errors import ConfigError, ValidationError

PAGES = ["/", "/overview/live", "/jobs", "/jobs?status=running&tenant=acme", "/dlq", "/dlq/live?tenant=a", "/tasks",
         "/schedules", "/tenants",
         "/workers", "/lateness", "/lateness?window=15m"]
ACTIONS = ["/actions/jobs/j1/cancel", "/actions/jobs/j1/replay", "/actions/jobs/j1/reschedule",
           "/actions/dlq/replay", "/actions/schedules/s1/pause", "/actions/schedules/s1/resume",
           "/actions/tenants/acme/weight", "/actions/dlq/purge", "/actions/tasks/send/pause",
           "/actions/tasks/send/resume", "/actions/tasks/send/limit", "/actions/tasks/send/unlimit"]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Nothing listens at the bootstrap address; librdkafka's retry lines go to a quiet logger."""
    quiet = logging.getLogger("test.console.librdkafka")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    before = list(config._client_logger)
    route_client_logs(quiet)
    yield load_settings(bootstrap="127.0.0.1:1", namespace="console-unit",
                        state_dir=str(tmp_path_factory.mktemp("console") / "state"))
    config._client_logger[:] = before


def _client(settings: Settings, access: ConsoleAccess | None = None) -> Iterator[TestClient]:
    app = create_app(settings, access)
    with TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=True,
                    follow_redirects=False) as client:
        yield client
    app.state.reads.close()


@pytest.fixture(scope="module")
def web(settings: Settings) -> Iterator[TestClient]:
    yield from _client(settings)


@pytest.fixture(scope="module")
def read_only(settings: Settings) -> Iterator[TestClient]:
    yield from _client(settings, ConsoleAccess(read_only=True))


@pytest.fixture(scope="module")
def guarded(settings: Settings) -> Iterator[TestClient]:
    yield from _client(settings, ConsoleAccess(host="0.0.0.0", token="s3cret-token"))


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# --- pages on an empty state directory, with no broker ---------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_with_a_line_for_what_it_cannot_read(web: TestClient, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 200, response.text
    assert "Traceback" not in response.text
    if "live" not in path:  # a part htmx swaps in has no page around it
        assert 'id="notice"' in response.text and "no view in" in response.text
    if path in ("/", "/overview/live", "/workers", "/lateness", "/tenants"):  # these read the log too
        assert "the log is unreachable" in response.text


def test_a_missing_job_is_a_404_page_of_one_line(web: TestClient) -> None:
    response = web.get("/jobs/no-such-job")
    assert response.status_code == 404
    line = re.search(r'id="problem"[^>]*>([^<]*)<', response.text)
    assert line is not None and "no-such-job" in line.group(1) and "Traceback" not in response.text


def test_an_unknown_page_is_a_404(web: TestClient) -> None:
    assert web.get("/nowhere").status_code == 404


def test_a_bad_filter_is_a_line_on_the_page(web: TestClient) -> None:
    response = web.get("/jobs?status=sleeping")
    assert response.status_code == 200
    assert "status: &#39;sleeping&#39; is not one of" in response.text
    assert "since: &#39;yesterday&#39; is not a time" in web.get("/dlq?since=yesterday").text


def test_htmx_is_served_from_the_package_and_the_pages_load_nothing_from_elsewhere(web: TestClient) -> None:
    js = web.get("/static/htmx.min.js")
    assert js.status_code == 200 and "htmx" in js.text[:200]
    page = web.get("/").text
    assert re.findall(r'(?:src|href)="(https?:)?//', page) == []
    assert 'hx-get="/overview/live"' in page and 'hx-trigger="every 5s"' in page


def test_pages_carry_security_headers_and_a_strict_csrf_cookie(settings: Settings) -> None:
    for fresh in _client(settings):
        response = fresh.get("/")
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(CSRF_COOKIE + "=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "set-cookie" not in fresh.get("/jobs").headers  # handed out once, then kept


# --- CSRF and read-only -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ACTIONS)
def test_a_post_without_the_csrf_token_is_refused(web: TestClient, path: str) -> None:
    web.get("/")  # the browser has its cookie
    response = web.post(path, data={"reason": "x"})
    assert response.status_code == 403 and "CSRF" in response.text


def test_a_post_with_a_wrong_csrf_token_is_refused(web: TestClient) -> None:
    web.get("/")
    assert web.post(ACTIONS[0], data={"csrf_token": "guessed"}).status_code == 403


def test_a_post_with_the_token_but_no_cookie_is_refused(settings: Settings) -> None:
    for client in _client(settings):
        assert client.post(ACTIONS[0], data={"csrf_token": "anything"}).status_code == 403


def test_a_post_with_the_csrf_token_is_let_through(web: TestClient) -> None:
    page = web.get("/dlq")
    token = web.cookies[CSRF_COOKIE]
    assert f'value="{token}"' in page.text or "csrf_token" not in page.text  # forms carry the cookie's value
    response = web.post("/actions/jobs/j1/cancel", data={"csrf_token": token})
    assert response.status_code == 400  # past the check: the job is not in the (empty) state directory
    assert "not sent: no job j1" in response.text
    header = web.post("/actions/jobs/j1/cancel", headers={"x-csrf-token": token})
    assert header.status_code == 400


def test_an_action_reads_its_id_from_the_encoded_path_and_refuses_another_shape(web: TestClient) -> None:
    web.get("/dlq")
    token = web.cookies[CSRF_COOKIE]
    encoded = web.post("/actions/jobs/y%2F..%2Fj1/cancel", data={"csrf_token": token})
    assert encoded.status_code == 400 and "not sent: no job y/../j1" in encoded.text  # the id whole, not j1
    split = web.post("/actions/jobs/y/j1/cancel", data={"csrf_token": token})
    assert split.status_code == 400 and "not sent: path:" in split.text  # an unencoded / names no id


def test_read_only_hides_every_action_and_refuses_every_post(read_only: TestClient) -> None:
    for path in PAGES:
        assert 'method="post"' not in read_only.get(path).text
    assert 'id="read-only-badge"' in read_only.get("/").text
    token = read_only.cookies[CSRF_COOKIE]
    for path in ACTIONS:
        response = read_only.post(path, data={"csrf_token": token})
        assert response.status_code == 403 and "read-only" in response.text


# --- the token ---------------------------------------------------------------------------------------


def test_a_console_with_a_token_asks_for_it(guarded: TestClient) -> None:
    refused = guarded.get("/")
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
    assert guarded.get("/", headers=_basic("ops", "wrong")).status_code == 401
    page = guarded.get("/", headers=_basic("alice", "s3cret-token"))
    assert page.status_code == 200 and "alice" in page.text
    assert guarded.get("/jobs", headers={"authorization": "Bearer s3cret-token"}).status_code == 200
    assert guarded.post(ACTIONS[0]).status_code == 401  # the token first, then CSRF


def test_without_a_token_only_loopback_names_are_served(web: TestClient, guarded: TestClient) -> None:
    assert web.get("/", headers={"host": "localhost:8080"}).status_code == 200
    assert web.get("/", headers={"host": "[::1]:8080"}).status_code == 200
    rebound = web.get("/", headers={"host": "evil.example:8080"})
    assert rebound.status_code == 403 and "csrf_token" not in rebound.text
    assert guarded.get("/", headers={"host": "console.example", **_basic("a", "s3cret-token")}).status_code == 200


def test_binding_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="needs --token"):
        ConsoleAccess(host="0.0.0.0")
    with pytest.raises(ConfigError, match="at least 8"):
        ConsoleAccess(host="0.0.0.0", token="short")
    assert ConsoleAccess(host="0.0.0.0", token="long-enough").token == "long-enough"
    assert ConsoleAccess(host="::1").host == "::1"


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True),
                                                ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False),
                                                ("example.org", False), ("::", False)])
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_who_asks() -> None:
    assert caller(None, None) == ""
    assert caller(None, "tok-tok-tok") is None
    assert caller("Basic !!!", "tok-tok-tok") is None
    assert caller(_basic("bob", "tok-tok-tok")["authorization"], "tok-tok-tok") == "bob"
    assert caller("Bearer tok-tok-tok", "tok-tok-tok") == ""
    assert requested_by("bob") == "bob"
    assert requested_by("").startswith("console@")
    assert not csrf_ok(None, "a") and not csrf_ok("a", None) and not csrf_ok("a", "b") and csrf_ok("a", "a")


# --- charts and parameters (pure) ---------------------------------------------------------------------


def test_histogram_buckets_hold_each_value_once() -> None:
    values = [0, 999, 1000, 1500, 2000, 4_999, 10_000_000, 99_000_000]
    counts = histogram_counts(values)
    assert sum(counts) == len(values)
    labels_ = bucket_labels()
    assert dict(zip(labels_, counts))["<1ms"] == 2 and dict(zip(labels_, counts))["1ms-2ms"] == 2
    assert dict(zip(labels_, counts))[">=10s"] == 2
    assert len(labels_) == len(counts)


def test_charts_escape_names() -> None:
    svg = str(share_svg([("<script>alert(1)</script>", 0.5, 0.25)], "t"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "served 50.0%" in svg and "weight 25.0%" in svg


def test_times_and_labels() -> None:
    assert time_us("15m", "since", now_s=1000.0) == 100_000_000
    assert time_us("2026-12-01T00:00:00", "since") == time_us("2026-12-01T00:00:00+00:00", "since")
    assert time_us("", "since") is None
    with pytest.raises(ValidationError, match="since"):
        time_us("soon", "since")
    assert labels("env=prod, team = a") == (("env", "prod"), ("team", "a"))
    with pytest.raises(ValidationError, match="label"):
        labels("noequals")


# --- the command -----------------------------------------------------------------------------------


def test_the_command_refuses_a_public_address_without_a_token_and_a_busy_port_in_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from engine.cli.main import main

    monkeypatch.delenv("EPOCHQ_CONSOLE_TOKEN", raising=False)
    assert main(["console", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "epochq: error: console: binding 0.0.0.0 (not loopback) needs --token T (or EPOCHQ_CONSOLE_TOKEN); "
        "without one it serves 127.0.0.1 only"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["console", "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr()
    assert "cannot listen on 127.0.0.1:" in err.err and "Traceback" not in err.err and err.out == ""


def test_a_bug_is_one_line_with_status_500_never_a_traceback(settings: Settings,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.console import pages

    def broken(_: object) -> dict[str, object]:
        raise RuntimeError("a bug in a page")

    monkeypatch.setattr(pages, "overview", broken)
    app = create_app(settings)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as web:
        response = web.get("/")
    app.state.reads.close()
    assert response.status_code == 500
    assert response.text == "internal error: RuntimeError: a bug in a page (EPOCHQ_TRACEBACK=1 logs where)"
