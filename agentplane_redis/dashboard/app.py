"""The dashboard's routes (``create_app``)."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import AgentplaneRedisError, InvalidInput
from ..model import Resumed
from ..views import duration, event_filter, filtered, has_keys, wait_filter

HERE = Path(__file__).resolve().parent
#: Rows a list page shows.
PAGE = 50
#: How often the overview refreshes itself, in seconds.
REFRESH_S = 2
#: Points the overview's charts keep per tenant: one per round of worker beats (10 s
#: apart by default), so the last quarter of an hour.
HISTORY = 90


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _age(value: datetime | None) -> str:
    if value is None:
        return ""
    seconds = (datetime.now(timezone.utc) - value).total_seconds()
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _keys(correlation: Sequence[Any]) -> str:
    return ", ".join(f"{k.namespace}/{k.value}" for k in correlation)


def _spark(values: Sequence[float]) -> Markup:
    """A small line chart (inline SVG) of ``values``, oldest left."""
    if len(values) < 2:
        return Markup("")
    top = max(values) or 1.0
    step = 160 / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{30 - 28 * v / top:.1f}" for i, v in enumerate(values))
    return Markup(
        '<svg class="spark" width="160" height="32" viewBox="0 0 160 32">'
        f'<polyline fill="none" stroke="#2f6fb3" stroke-width="1.5" points="{points}"/></svg>'
    )


def _payload(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters.update(when=_when, age=_age, keys=_keys, payload=_payload, spark=_spark)
    return env


class BasicAuth(BaseHTTPMiddleware):
    """Every request needs HTTP basic credentials equal to ``user:password``."""

    def __init__(self, app: Any, credentials: tuple[str, str]) -> None:
        super().__init__(app)
        self.expected = f"{credentials[0]}:{credentials[1]}".encode()

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        given = request.headers.get("authorization", "")
        scheme, _, encoded = given.partition(" ")
        try:
            ok = scheme.lower() == "basic" and secrets.compare_digest(
                base64.b64decode(encoded, validate=True), self.expected
            )
        except (binascii.Error, ValueError):
            ok = False
        if not ok:
            return Response(
                "credentials needed", 401, {"WWW-Authenticate": 'Basic realm="agentplane-redis"'}
            )
        return await call_next(request)


def _filters(request: Request) -> dict[str, str | None]:
    q = request.query_params
    return {name: (q.get(name) or None) for name in ("key", "kind", "source", "after", "run")}


def _events(f: dict[str, str | None]) -> Callable[[Any], bool]:
    return event_filter(f["key"], f["kind"], f["source"])


def _waits(f: dict[str, str | None]) -> Callable[[Any], bool]:
    return wait_filter(f["key"], f["kind"], f["source"], f["run"])


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{text!r} is not an ISO 8601 instant") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _ago(text: str) -> datetime:
    return datetime.now(timezone.utc) - duration(text)


def _revive(store: Any, f: dict[str, str]) -> str:
    outcome = store.events.revive(f["source"], f["id"])
    if outcome is None:
        raise InvalidInput(f"({f['source']!r}, {f['id']!r}) is not a dead letter")
    how = "resumed a waiting run" if isinstance(outcome, Resumed) else "live again"
    return f"revived {f['source']}/{f['id']}: {how}"


def _move(store: Any, f: dict[str, str], when: datetime) -> str:
    if not store.timers.reschedule(f["run"], f["effect"], when):
        raise InvalidInput(
            f"timer ({f['run']!r}, {f['effect']!r}) is not armed or a worker holds it"
        )
    return f"timer {f['run']}/{f['effect']} fires at {when.isoformat()}"


#: The actions a dashboard started with --allow-actions takes: form fields -> what it did.
ACTIONS: dict[str, Callable[[Any, dict[str, str]], str]] = {
    "revive": _revive,
    "fire-now": lambda store, f: _move(store, f, datetime.now(timezone.utc)),
    "reschedule": lambda store, f: _move(store, f, _instant(f["at"])),
    "sweep": lambda store, f: f"swept {store.events.sweep_unclaimed(_ago(f['older_than']))} events",
    "purge": lambda store, f: f"purged {store.events.purge(_ago(f['older_than']))} rows",
    "seal": lambda store, f: (
        f"sealed {f['run']}" if store.runs.seal(f["run"]) else f"{f['run']} was sealed"
    ),
    "close": lambda store, f: (
        f"closed {f['run']}: {store.runs.close(f['run']).timers} timers removed"
    ),
}


class Dashboard:
    """The pages over one or more tenants' stores (``create_app`` routes them)."""

    def __init__(self, stores: Sequence[Any], note: str | None, actions: bool) -> None:
        self.by_tenant = {store.tenant: store for store in stores}
        self.note = note
        self.actions = actions
        #: Every form carries it; a POST without it (another site's) is refused.
        self.csrf = secrets.token_urlsafe(32)
        self.env = _environment()
        #: Per tenant: the workers' beats last seen, and (timers fired a second,
        #: lateness p99 in ms) for each round of beats since, for the charts.
        self.seen: dict[str, tuple[Any, ...]] = {}
        self.history: dict[str, deque[tuple[float, float]]] = {
            t: deque(maxlen=HISTORY) for t in self.by_tenant
        }

    def page(
        self, name: str, status: int = 200, request: Request | None = None, **context: Any
    ) -> HTMLResponse:
        """A template rendered; ``request``: the page's own, whose ``done`` (what an
        action just did) is shown."""
        done = request.query_params.get("done") if request is not None else None
        context.update(
            done=done,
            tenants=list(self.by_tenant),
            note=self.note,
            refresh=REFRESH_S,
            actions=self.actions,
            csrf=self.csrf,
        )
        return HTMLResponse(self.env.get_template(name).render(**context), status)

    def store_of(self, request: Request) -> Any:
        store = self.by_tenant.get(request.path_params["tenant"])
        if store is None:
            raise HTTPException(404, "no such tenant on this dashboard")
        return store

    def guarded(self, endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """The endpoint, with a server that does not answer shown as a banner and
        refused input or a corrupt row as a message: never a traceback."""

        def run(request: Request) -> Response:
            try:
                return endpoint(request)
            except (redis.exceptions.RedisError, OSError) as down:
                return self.page("down.html", 503, error=str(down))
            except InvalidInput as bad:
                return self.page("error.html", 400, error=str(bad))
            except AgentplaneRedisError as wrong:
                return self.page("error.html", 500, error=f"{type(wrong).__name__}: {wrong}")

        return run

    def recent(self, tenant: str, workers: Sequence[Any]) -> dict[str, Any]:
        """What the tenant's workers said of their last beats: timers fired a second
        (summed) and lateness p99 (the worst), with the points of the beats before."""
        beats = tuple(sorted((w.worker, w.beat_at) for w in workers))
        fired = sum(float(w.record.get("fired_per_s") or 0) for w in workers)
        late = max((float(w.record.get("late_p99") or 0) for w in workers), default=0.0)
        history = self.history[tenant]
        if beats and beats != self.seen.get(tenant):
            self.seen[tenant] = beats
            history.append((fired, late * 1000))
        return {
            "fired": fired,
            "late_ms": late * 1000,
            "fired_points": [p[0] for p in history],
            "late_points": [p[1] for p in history],
        }

    def overview_rows(self) -> list[dict[str, Any]]:
        rows = []
        for tenant, store in self.by_tenant.items():
            workers = store.workers.running()
            rows.append(
                {
                    "tenant": tenant,
                    "empty": not has_keys(store),
                    "stats": store.events.stats(),
                    "timers": store.timers.stats(),
                    "next_due": store.timers.next_due(),
                    "oldest_live": store.events.oldest_live(),
                    "workers": workers,
                    "recent": self.recent(tenant, workers),
                }
            )
        return rows

    def overview(self, request: Request) -> Response:
        return self.page("overview.html", request=request, rows=self.overview_rows(), error=None)

    def overview_fragment(self, request: Request) -> Response:
        try:
            rows = self.overview_rows()
        except (redis.exceptions.RedisError, OSError) as down:
            return self.page("overview_rows.html", rows=[], error=str(down))
        return self.page("overview_rows.html", rows=rows, error=None)

    def listing(
        self,
        request: Request,
        name: str,
        store: Any,
        found: tuple[list[Any], str | None],
        *,
        total: int,
        f: dict[str, Any],
        **extra: Any,
    ) -> Response:
        """A list page: its items, the cursor of the next page, and how many there are."""
        items, cursor = found
        return self.page(
            name,
            request=request,
            tenant=store.tenant,
            items=items,
            next=cursor,
            total=total,
            f=f,
            **extra,
        )

    def dead_letters(self, request: Request) -> Response:
        store, f = self.store_of(request), _filters(request)
        items, cursor = filtered(store.events.dead_letters_page, _events(f), PAGE, f["after"])
        total = store.events.stats().dead
        return self.listing(request, "dead_letters.html", store, (items, cursor), total=total, f=f)

    def live(self, request: Request) -> Response:
        store, f = self.store_of(request), _filters(request)
        newest = request.query_params.get("order") == "newest"

        def fetch(room: int, after: str | None) -> tuple[list[Any], str | None]:
            return store.events.live_page(room, after, newest=newest)  # type: ignore[no-any-return]

        items, cursor = filtered(fetch, _events(f), PAGE, f["after"])
        total = store.events.stats().live
        return self.listing(
            request,
            "live.html",
            store,
            (items, cursor),
            total=total,
            f={**f, "order": "newest" if newest else None},
        )

    def waits(self, request: Request) -> Response:
        store, f = self.store_of(request), _filters(request)
        parked = request.url.path.endswith("/parked")
        fetch = store.events.parked_waits_page if parked else store.events.waiting_page
        items, cursor = filtered(fetch, _waits(f), PAGE, f["after"])
        stats = store.events.stats()
        return self.listing(
            request,
            "waits.html",
            store,
            (items, cursor),
            total=stats.parked if parked else stats.waits,
            f=f,
            title="parked waits" if parked else "waits",
        )

    def timers(self, request: Request) -> Response:
        store, f = self.store_of(request), _filters(request)
        if f["run"]:
            items, cursor = store.timers.armed(f["run"])[:PAGE], None
        else:
            items, cursor = store.timers.pending_page(PAGE, f["after"])
        total = store.timers.pending_count()
        return self.listing(request, "timers.html", store, (items, cursor), total=total, f=f)

    def run(self, request: Request) -> Response:
        store = self.store_of(request)
        found = store.runs.lookup(request.path_params["run"])
        return self.page("run.html", request=request, tenant=store.tenant, run=found)

    def event(self, request: Request) -> Response:
        store = self.store_of(request)
        source, id_ = request.path_params["source"], request.path_params["id"]
        found = store.events.lookup(source, id_)
        if found is None:
            return self.page("error.html", 404, error=f"no event ({source!r}, {id_!r})")
        return self.page("event.html", request=request, tenant=store.tenant, record=found)

    def timer(self, request: Request) -> Response:
        store = self.store_of(request)
        run, effect = request.path_params["run"], request.path_params["effect"]
        found = store.timers.lookup(run, effect)
        if found is None:
            return self.page("error.html", 404, error=f"no timer ({run!r}, {effect!r})")
        return self.page("timer.html", request=request, tenant=store.tenant, record=found)

    async def act(self, request: Request) -> Response:
        """One action from a form of the dashboard's own pages (``--allow-actions``):
        refused (403) without the page's token, or from another origin."""
        form = await request.form()
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.url.netloc}"
        token = str(form.get("csrf", ""))
        if not hmac.compare_digest(token, self.csrf) or (origin and origin != own):
            return self.page("error.html", 403, error="refused: not a form of this dashboard")
        store = self.store_of(request)
        fields = {k: str(v) for k, v in form.items()}
        back = fields.get("back") or f"/t/{store.tenant}/dead-letters"
        try:
            said = await run_in_threadpool(ACTIONS[request.path_params["action"]], store, fields)
        except KeyError:
            return self.page("error.html", 404, error="no such action")
        except (redis.exceptions.RedisError, OSError) as down:
            return self.page("down.html", 503, error=str(down))
        except InvalidInput as bad:
            return self.page("error.html", 400, error=str(bad))
        return RedirectResponse(f"{back}{'&' if '?' in back else '?'}done={quote(said)}", 303)

    def not_found(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return self.page("error.html", status, error=str(getattr(exc, "detail", "not found")))


def create_app(
    stores: Sequence[Any],
    *,
    auth: tuple[str, str] | None = None,
    note: str | None = None,
    allow_actions: bool = False,
) -> Starlette:
    """The dashboard over ``stores`` (sync stores, one per tenant). With ``auth``
    (user, password) every request needs those credentials; ``note`` is shown on
    every page (why only one tenant is shown, for instance). Read-only unless
    ``allow_actions``: a POST is answered 405; with it, the pages' forms revive,
    fire, reschedule, sweep, purge, seal and close, each asking first in the
    browser and carrying a token another site cannot know."""
    if not stores:
        raise InvalidInput("the dashboard needs at least one tenant's store")
    d = Dashboard(stores, note, allow_actions)
    g = d.guarded
    routes = [
        Route("/", g(d.overview)),
        Route("/fragment/overview", d.overview_fragment),
        Route("/t/{tenant}/dead-letters", g(d.dead_letters)),
        Route("/t/{tenant}/live", g(d.live)),
        Route("/t/{tenant}/waiting", g(d.waits)),
        Route("/t/{tenant}/parked", g(d.waits)),
        Route("/t/{tenant}/timers", g(d.timers)),
        Route("/t/{tenant}/run/{run:path}", g(d.run)),
        Route("/t/{tenant}/event/{source}/{id:path}", g(d.event)),
        Route("/t/{tenant}/timer/{run}/{effect:path}", g(d.timer)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    if allow_actions:
        routes.append(Route("/t/{tenant}/actions/{action}", d.act, methods=["POST"]))
    middleware = [Middleware(BasicAuth, credentials=auth)] if auth is not None else []
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={HTTPException: d.not_found}
    )
