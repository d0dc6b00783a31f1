"""The web dashboard over HTTP (Starlette's test client) on fakeredis, and the
CLI's dashboard command on a real server."""

from __future__ import annotations

import base64
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentplane_redis import InvalidInput, RedisStore, Timer
from agentplane_redis.dashboard import create_app
from agentplane_redis.testing import fake_server, fake_store

from helpers import at, ev, sub, timer


def filled() -> tuple[Any, Any]:
    """Two tenants' stores on one fake server: acme with a dead letter, a held event,
    waits and timers; beta empty."""
    server = fake_server()
    acme = fake_store("acme", server=server)
    acme.events.buffer(ev("old", "order/A-1", payload={"amount": 3}), at=at(0))
    acme.events.buffer(ev("erased", "order/A-2", payload={"secret": 1}), at=at(0))
    acme.events.erase_payload("src", "erased")
    acme.events.sweep_unclaimed(at(0), "nobody waited")
    acme.events.buffer(ev("held", "order/B-1"), at=at(1))
    acme.events.wait(sub("run-1", "await", "order/B-1"), at=at(2))
    acme.events.subscribe(sub("run-2", "later", "order/C-1"), at=at(3))
    acme.timers.arm(timer("run-1", "remind", 10))
    acme.timers.claim_due(now=at(10), lease=timedelta(seconds=30))
    acme.timers.arm(timer("run-1", "again", 20))
    return acme, fake_store("beta", server=server)


def cells(html: str, row_id: str) -> list[str]:
    """The texts of the cells of the table row whose data-tenant is ``row_id``."""
    row = re.search(rf'<tr data-tenant="{row_id}">(.*?)</tr>', html, re.S)
    assert row is not None, html
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    ]


def test_the_overview_counts_each_tenant_and_its_fragment_follows_new_events():
    acme, beta = filled()
    client = TestClient(create_app([acme, beta]))
    page = client.get("/")
    assert page.status_code == 200
    assert 'hx-get="/fragment/overview"' in page.text
    assert "/static/htmx.min.js" in page.text
    row = cells(page.text, "acme")
    assert row[1:7] == [
        "0",
        "1",
        "0",
        "2",
        "2",
        "1",
    ]  # live, claimed, consumed, dead, waits, parked
    assert "(no keys on this server)" in cells(page.text, "beta")[0]
    acme.events.buffer(ev("new", "order/Z-9"))
    assert cells(client.get("/fragment/overview").text, "acme")[1] == "1"
    assert client.get("/static/htmx.min.js").status_code == 200


def test_lists_filter_page_and_link_to_their_items():
    acme, _beta = filled()
    client = TestClient(create_app([acme]))
    dead = client.get("/t/acme/dead-letters").text
    assert "nobody waited" in dead
    assert 'href="/t/acme/event/src/old"' in dead
    assert "old" not in client.get("/t/acme/dead-letters?key=order/A-2").text.split("<table")[1]
    for n in range(60):
        acme.events.subscribe(sub(f"p{n:02d}", "w", "order/P-1"), at=at(100 + n))
    first = client.get("/t/acme/waiting?key=order/P-1").text
    assert first.count('href="/t/acme/run/p') == 50
    next_link = re.search(r'<a id="next" href="([^"]+)"', first)
    assert next_link is not None
    rest = client.get("/t/acme/waiting" + next_link.group(1).replace("&amp;", "&")).text
    assert rest.count('href="/t/acme/run/p') == 10
    timers = client.get("/t/acme/timers").text
    assert 'href="/t/acme/timer/run-1/remind"' in timers
    assert "2 shown of 2" in timers
    for listing in ("dead-letters", "live", "waiting", "parked", "timers"):
        refused = client.get(f"/t/acme/{listing}?after=nonsense")
        assert refused.status_code == 400, listing
        assert "nonsense" in refused.text, listing


def test_run_event_and_timer_pages():
    acme, _beta = filled()
    client = TestClient(create_app([acme]))
    run = client.get("/t/acme/run/run-1").text
    assert "Not sealed." in run
    assert 'href="/t/acme/event/src/held"' in run  # the wait holds it
    assert "remind" in run
    assert "again" in run
    event = client.get("/t/acme/event/src/old").text
    assert "&#34;amount&#34;: 3" in event  # the payload, formatted (escaped)
    assert "<em>erased</em>" in client.get("/t/acme/event/src/erased").text
    timer_page = client.get("/t/acme/timer/run-1/remind").text
    assert re.search(r"<th>claims</th><td>1</td>", timer_page)
    assert client.get("/t/acme/event/src/nothing").status_code == 404
    assert client.get("/t/nobody/timers").status_code == 404


def test_it_is_read_only_and_asks_for_credentials_when_given():
    acme, _beta = filled()
    open_app = TestClient(create_app([acme]))
    assert open_app.post("/", data={"x": "1"}).status_code == 405
    assert open_app.post("/t/acme/dead-letters").status_code == 405
    assert "<form" not in open_app.get("/t/acme/run/run-1").text  # no buttons, no actions
    locked = TestClient(create_app([acme], auth=("ops", "s3cret")))
    assert locked.get("/").status_code == 401
    good = base64.b64encode(b"ops:s3cret").decode()
    assert locked.get("/", headers={"Authorization": f"Basic {good}"}).status_code == 200
    bad = base64.b64encode(b"ops:guess").decode()
    assert locked.get("/", headers={"Authorization": f"Basic {bad}"}).status_code == 401
    with pytest.raises(InvalidInput):
        create_app([])


def test_a_server_that_is_down_shows_a_banner_not_a_traceback():
    acme, _beta = filled()
    client = TestClient(create_app([acme]))
    acme.client.connection_pool.connection_kwargs["server"].connected = False
    try:
        for path in ("/", "/t/acme/dead-letters", "/t/acme/run/run-1"):
            page = client.get(path)
            assert page.status_code == 503
            assert 'id="down"' in page.text
            assert "Traceback" not in page.text
        fragment = client.get("/fragment/overview")
        assert fragment.status_code == 200
        assert 'id="down"' in fragment.text  # the overview keeps asking
    finally:
        acme.client.connection_pool.connection_kwargs["server"].connected = True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served_by_the_command(args: list[str]) -> tuple[Any, str]:
    """``agentplane-redis <args> --port P`` started, and its overview once it
    answers: the process (to stop) and the page."""
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    port = _free_port()
    proc = subprocess.Popen([exe, *args, "--port", str(port)], stderr=subprocess.PIPE, text=True)
    deadline, html = time.monotonic() + 60, ""
    while time.monotonic() < deadline and not html:
        try:
            html = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    return proc, html


@pytest.mark.real
def test_the_dashboard_command_serves_every_tenant_and_refuses_an_open_bind(start):
    """agentplane-redis dashboard --all-tenants: serves each tenant SCAN finds; off
    loopback without --auth it refuses (exit 2)."""
    server = start("valkey")
    RedisStore.from_url(server.url, tenant="one").timers.arm(Timer("r", "t", at(0)))
    RedisStore.from_url(server.url, tenant="two").events.buffer(ev("e", "k/1"), at=at(0))
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    refused = subprocess.run(
        [exe, "--url", server.url, "dashboard", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert "--auth" in refused.stderr
    proc, html = served_by_the_command(
        ["--url", server.url, "--tenant", "one", "dashboard", "--all-tenants"]
    )
    try:
        assert 'data-tenant="one"' in html
        assert 'data-tenant="two"' in html
    finally:
        proc.terminate()
        proc.wait(30)


def _form(html: str, action: str) -> dict[str, str]:
    """The hidden fields of the first form posting to ``action``."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}"(.*?)</form>', html, re.S)
    assert found is not None, html
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', found.group(1)))


def test_actions_work_only_when_allowed_and_only_from_its_own_pages():
    acme, _beta = filled()
    client = TestClient(create_app([acme], allow_actions=True), follow_redirects=False)
    page = client.get("/t/acme/dead-letters").text
    fields = _form(page, "/t/acme/actions/revive")
    assert fields["source"] == "src"
    # Without the page's token, or from another origin: refused, nothing done.
    stolen = {k: v for k, v in fields.items() if k != "csrf"}
    assert client.post("/t/acme/actions/revive", data=stolen).status_code == 403
    foreign = {"origin": "http://evil.example"}
    assert client.post("/t/acme/actions/revive", data=fields, headers=foreign).status_code == 403
    assert acme.events.stats().dead == 2
    done = client.post("/t/acme/actions/revive", data=fields)
    assert done.status_code == 303
    assert "done=revived" in done.headers["location"]
    assert acme.events.stats().dead == 1
    shown = client.get(done.headers["location"]).text
    assert 'id="done"' in shown
    token = fields["csrf"]
    fire = client.post(
        "/t/acme/actions/fire-now", data={"csrf": token, "run": "run-1", "effect": "again"}
    )
    assert fire.status_code == 303
    assert acme.timers.lookup("run-1", "again").timer.fire_at <= datetime.now(timezone.utc)
    bad = client.post(
        "/t/acme/actions/reschedule",
        data={"csrf": token, "run": "run-1", "effect": "again", "at": "soon"},
    )
    assert bad.status_code == 400
    assert client.post("/t/acme/actions/nothing", data={"csrf": token}).status_code == 404
    assert (
        client.post("/t/acme/actions/seal", data={"csrf": token, "run": "run-2"}).status_code == 303
    )
    assert acme.runs.is_sealed("run-2")
    swept = client.post("/t/acme/actions/sweep", data={"csrf": token, "older_than": "1s"})
    assert "swept" in swept.headers["location"]
    # Read-only: no buttons, and the action routes do not exist.
    read_only = TestClient(create_app([acme]))
    assert 'method="post"' not in read_only.get("/t/acme/dead-letters").text
    assert read_only.post("/t/acme/actions/revive", data=fields).status_code in (404, 405)


def test_live_events_list_oldest_or_newest_first_and_filtered():
    acme, _beta = filled()
    for n in range(3):
        acme.events.buffer(ev(f"live{n}", f"order/L-{n}"), at=at(1000 + n))
    client = TestClient(create_app([acme]))
    oldest = client.get("/t/acme/live").text
    assert oldest.index(">live0<") < oldest.index(">live2<")
    newest = client.get("/t/acme/live?order=newest").text
    assert newest.index(">live2<") < newest.index(">live0<")
    keyed = client.get("/t/acme/live?key=order/L-1").text
    assert ">live1<" in keyed
    assert ">live0<" not in keyed
    page, cursor = acme.events.live_page(2)
    rest, end = acme.events.live_page(10, cursor)
    assert [b.event.id for b in page + rest] == ["live0", "live1", "live2"]
    assert end is None


def test_the_overview_charts_what_the_workers_heartbeats_say():
    """A worker's beats carry the timers it fired a second and their lateness; the
    overview sums and charts them, a point per round of beats."""
    acme, _beta = filled()
    app = TestClient(create_app([acme]))
    for n, (fired, late) in enumerate(((4.0, 0.002), (6.0, 0.003), (5.0, 0.010))):
        record = {"host": "h", "pid": 1, "fired_per_s": fired, "late_p99": late}
        acme.workers.heartbeat("w:1", record, timedelta(seconds=30))
        time.sleep(0.002)  # a beat of its own
        page = app.get("/fragment/overview").text
        row = re.search(r'<tr data-tenant="acme"><td>acme</td>(.*?)</tr>', page, re.S)
        assert row is not None
        assert f">{fired:.1f}<" in row.group(1)
        assert f">{late * 1000:.1f} ms<" in row.group(1)
        assert ("<svg" in row.group(1)) == (n > 0)  # a line once there are two points


def test_a_worker_s_beats_say_how_many_timers_it_fired_and_how_late():
    from agentplane_redis.worker import Worker

    store = fake_store("acme")
    for n in range(4):
        store.timers.arm(Timer("r", f"t{n}", at(0)))
    worker = Worker(store, on_timer=lambda s, t: None)
    worker.run_once()
    worker._beat(worker._record())
    [entry] = store.workers.running()
    assert entry.record["late_p99"] > 0
    assert entry.record["late_max"] >= entry.record["late_p50"]
    assert "fired_per_s" in entry.record


def test_the_dashboard_reads_every_backend(backend, make):
    """Over fakeredis, Redis, Valkey and both clusters, the pages render a tenant's
    state (sync stores: the dashboard reads on its thread pool)."""
    if backend.flavour == "async":
        store = RedisStore(backend.sync_client(), tenant=backend.tenant)
    else:
        store = make(backend.tenant)
    store.events.buffer(ev("e1", "order/A-1"), at=at(0))
    store.events.subscribe(sub("run-1", "w", "order/B-1"), at=at(1))
    store.timers.arm(timer("run-1", "t", 5))
    client = TestClient(create_app([store]))
    assert cells(client.get("/").text, backend.tenant)[1] == "1"
    assert ">e1<" in client.get(f"/t/{backend.tenant}/live").text
    assert (
        f'href="/t/{backend.tenant}/timer/run-1/t"'
        in client.get(f"/t/{backend.tenant}/run/run-1").text
    )
    store.client.close()


@pytest.mark.real
def test_through_a_tenant_s_acl_user_it_shows_that_tenant_and_says_why(start):
    """dashboard --all-tenants through a tenant's user, who may not SCAN the server:
    only its tenant, with a note saying so."""
    import redis

    from agentplane_redis import acl

    server = start("redis")
    admin = redis.Redis(port=server.port)
    acl.create_tenant_user(admin, "acme", "pw", "acme-user")
    RedisStore(admin, tenant="other").events.buffer(ev("x", "k/1"), at=at(0))
    exe = shutil.which("agentplane-redis")
    assert exe is not None
    url = f"redis://acme-user:pw@127.0.0.1:{server.port}/0"
    proc, html = served_by_the_command(
        ["--url", url, "--tenant", "acme", "dashboard", "--all-tenants"]
    )
    try:
        assert 'data-tenant="acme"' in html
        assert 'data-tenant="other"' not in html
        assert "may not list the server" in html
    finally:
        proc.terminate()
        proc.wait(30)
