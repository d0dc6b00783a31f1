"""Prometheus metrics: a collector over stores, and a worker's counters.

``StoreCollector`` reads each store through its public API at scrape time
(``stats``, ``pending_count``, ``next_due``, ``oldest_live``), so it cannot
drift from the key layout. ``WorkerMetrics`` is what a ``Worker`` counts.
``serve`` exposes both on a port; ``docs/operations.md`` says what each
metric means and what to alert on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAMESPACE = "agentplane"


#: How long a scrape waits for the stores to answer: past it, those that have not are
#: reported down (``agentplane_up`` 0), well inside Prometheus' default 10 s timeout.
SCRAPE_DEADLINE_S = 0.8


def _read(store: Any) -> tuple[Any, int, datetime | None, datetime | None]:
    return (
        store.events.stats(),
        store.timers.pending_count(),
        store.timers.next_due(),
        store.events.oldest_live(),
    )


class StoreCollector(Collector):
    """Gauges of one or more (sync) stores, one label value per tenant.

    The stores are read on a thread of their own, and a scrape returns after at most
    ``SCRAPE_DEADLINE_S``: a server that is down (whose client retries with backoff)
    makes the tenants not yet read show as down, never a scrape that times out. While
    an earlier scrape's reads are still running, a new scrape reports every store
    down at once, so reads never pile up against a server that is away."""

    def __init__(self, stores: Any, deadline: float = SCRAPE_DEADLINE_S) -> None:
        self.stores: list[Any] = list(stores) if isinstance(stores, Sequence) else [stores]
        self.deadline = deadline
        self._busy = threading.Lock()

    def _read_all(self) -> dict[int, Any]:
        """Each store's readings by index, as many as answered before the deadline."""
        found: dict[int, Any] = {}
        if not self._busy.acquire(blocking=False):
            return found  # the last scrape's reads still wait on the server

        def run() -> None:
            try:
                for i, store in enumerate(self.stores):
                    try:
                        found[i] = _read(store)
                    except Exception:  # a scrape reports the store down, never fails
                        found[i] = None
            finally:
                self._busy.release()

        reader = threading.Thread(target=run, name="agentplane-scrape", daemon=True)
        reader.start()
        reader.join(self.deadline)
        return dict(found)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["tenant"]
        up = GaugeMetricFamily(
            f"{NAMESPACE}_up", "1 when the tenant's store answered", labels=labels
        )
        events = GaugeMetricFamily(
            f"{NAMESPACE}_events", "Events by state", labels=["tenant", "state"]
        )
        waits = GaugeMetricFamily(f"{NAMESPACE}_waits", "Registered waits", labels=labels)
        parked = GaugeMetricFamily(f"{NAMESPACE}_waits_parked", "Parked marks", labels=labels)
        timers = GaugeMetricFamily(f"{NAMESPACE}_timers_pending", "Armed timers", labels=labels)
        overdue = GaugeMetricFamily(
            f"{NAMESPACE}_timers_overdue_seconds",
            "How long ago the soonest timer fell due (0 when none is due)",
            labels=labels,
        )
        oldest = GaugeMetricFamily(
            f"{NAMESPACE}_oldest_live_event_age_seconds",
            "Age of the oldest event nobody has claimed (0 when none)",
            labels=labels,
        )
        readings = self._read_all()
        for i, store in enumerate(self.stores):
            tenant = store.tenant
            reading = readings.get(i)
            if reading is None:
                up.add_metric([tenant], 0)
                continue
            stats, pending, due, first = reading
            now = datetime.now(timezone.utc)
            up.add_metric([tenant], 1)
            for state, count in (
                ("live", stats.live),
                ("held", stats.claimed),
                ("consumed", stats.consumed),
                ("dead", stats.dead),
            ):
                events.add_metric([tenant, state], count)
            waits.add_metric([tenant], stats.waits)
            parked.add_metric([tenant], stats.parked)
            timers.add_metric([tenant], pending)
            overdue.add_metric([tenant], max(0.0, (now - due).total_seconds()) if due else 0.0)
            oldest.add_metric([tenant], (now - first).total_seconds() if first else 0.0)
        yield from (up, events, waits, parked, timers, overdue, oldest)


def package_version() -> str:
    try:
        return version("agentplane-redis")
    except PackageNotFoundError:
        return "unknown"


class BuildInfo(Collector):
    """``agentplane_build_info{version, library}``: 1, labelled with the package's
    version and the Functions library its stores call."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from .scripts import library  # noqa: PLC0415 - read once a scrape asks

        info = GaugeMetricFamily(
            f"{NAMESPACE}_build_info",
            "The package's version and its Functions library",
            labels=["version", "library"],
        )
        info.add_metric([package_version(), library().name], 1)
        yield info


class Registry(CollectorRegistry):
    """A registry that exposes no ``_created`` series (the time each counter and
    histogram was made, which Prometheus does not need and which doubles a scrape)."""

    def collect(self) -> Iterator[Any]:
        for family in super().collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


#: Where lateness falls, in seconds: a woken worker's few milliseconds up to a lease.
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class WorkerMetrics:
    """A worker's counters and histograms, in a registry of their own unless given one."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        r, ns, t = self.registry, NAMESPACE, ["tenant"]
        self.claimed = Counter(
            "worker_timers_claimed", "Timers claimed", t, namespace=ns, registry=r
        )
        self.handled = Counter(
            "worker_handler_calls",
            "Handler calls by tenant, kind and outcome",
            ["tenant", "kind", "outcome"],
            namespace=ns,
            registry=r,
        )
        self.duration = Histogram(
            "worker_handler_seconds",
            "Handler durations",
            ["tenant", "kind"],
            namespace=ns,
            registry=r,
        )
        self.lateness = Histogram(
            "worker_timer_lateness_seconds",
            "How late timers fire: handler start minus fire_at",
            t,
            namespace=ns,
            registry=r,
            buckets=LATENESS_BUCKETS,
        )
        self.redelivered = Counter(
            "worker_redeliveries", "Parked waits handed over again", t, namespace=ns, registry=r
        )
        self.swept = Counter(
            "worker_swept_events", "Events dead-lettered", t, namespace=ns, registry=r
        )
        self.purged = Counter("worker_purged_events", "Rows purged", t, namespace=ns, registry=r)
        self.reconnects = Counter(
            "worker_reconnects", "Passes that found the server away", namespace=ns, registry=r
        )
        self.server_errors = Counter(
            "worker_server_errors",
            "Passes that found the server away or in a transient state, by state",
            ["state"],
            namespace=ns,
            registry=r,
        )
        self.last_success = Gauge(
            "worker_last_success_timestamp_seconds",
            "When the last pass finished without error",
            namespace=ns,
            registry=r,
        )

    def observe_handler(self, tenant: str, kind: str, seconds: float, ok: bool) -> None:
        self.handled.labels(tenant, kind, "ok" if ok else "error").inc()
        self.duration.labels(tenant, kind).observe(seconds)

    def observe_lateness(self, tenant: str, seconds: float) -> None:
        self.lateness.labels(tenant).observe(max(0.0, seconds))

    def observe_store_pass(self, tenant: str, report: Any) -> None:
        """What one pass did for one tenant."""
        self.claimed.labels(tenant).inc(report.claimed)
        self.redelivered.labels(tenant).inc(report.redelivered)
        self.swept.labels(tenant).inc(report.swept)
        self.purged.labels(tenant).inc(report.purged)

    def observe_pass(self, report: Any) -> None:
        """A whole pass finished without error."""
        self.last_success.set(time.time())


def registry_for(stores: Any, worker_metrics: WorkerMetrics | None = None) -> CollectorRegistry:
    """A registry with the stores' gauges, and the worker's metrics if given."""
    registry = worker_metrics.registry if worker_metrics is not None else Registry()
    registry.register(StoreCollector(stores))
    registry.register(BuildInfo())
    return registry


def serve(
    stores: Any,
    port: int,
    *,
    addr: str = "127.0.0.1",
    worker_metrics: WorkerMetrics | None = None,
) -> Any:
    """Exposes the metrics on http://addr:port/metrics from a background thread; returns
    the HTTP server (``.shutdown()`` stops it)."""
    server, _thread = start_http_server(port, addr, registry_for(stores, worker_metrics))
    return server


def families(text: str) -> Iterable[Any]:
    """The metric families of an exposition text (for tests and tools)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    return text_string_to_metric_families(text)
