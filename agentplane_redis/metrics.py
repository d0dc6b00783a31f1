"""Prometheus metrics: a collector over stores, and a worker's counters.

``StoreCollector`` reads each store through its public API at scrape time
(``stats``, ``pending_count``, ``next_due``, ``oldest_live``), so it cannot
drift from the key layout. ``WorkerMetrics`` is what a ``Worker`` counts.
``serve`` exposes both on a port; ``docs/operations.md`` says what each
metric means and what to alert on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAMESPACE = "agentplane"


class StoreCollector(Collector):
    """Gauges of one or more (sync) stores, one label value per tenant."""

    def __init__(self, stores: Any) -> None:
        self.stores: list[Any] = list(stores) if isinstance(stores, Sequence) else [stores]

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
        for store in self.stores:
            tenant = store.tenant
            try:
                stats = store.events.stats()
                pending = store.timers.pending_count()
                due = store.timers.next_due()
                first = store.events.oldest_live()
            except Exception:  # a scrape reports the store down, never fails
                up.add_metric([tenant], 0)
                continue
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


class WorkerMetrics:
    """A worker's counters and histograms, in a registry of their own unless given one."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r, ns = self.registry, NAMESPACE
        self.claimed = Counter("worker_timers_claimed", "Timers claimed", namespace=ns, registry=r)
        self.handled = Counter(
            "worker_handler_calls",
            "Handler calls by kind and outcome",
            ["kind", "outcome"],
            namespace=ns,
            registry=r,
        )
        self.duration = Histogram(
            "worker_handler_seconds", "Handler durations", ["kind"], namespace=ns, registry=r
        )
        self.redelivered = Counter(
            "worker_redeliveries", "Parked waits handed over again", namespace=ns, registry=r
        )
        self.swept = Counter(
            "worker_swept_events", "Events dead-lettered", namespace=ns, registry=r
        )
        self.purged = Counter("worker_purged_events", "Rows purged", namespace=ns, registry=r)
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

    def observe_handler(self, kind: str, seconds: float, ok: bool) -> None:
        self.handled.labels(kind, "ok" if ok else "error").inc()
        self.duration.labels(kind).observe(seconds)

    def observe_pass(self, report: Any) -> None:
        self.claimed.inc(report.claimed)
        self.redelivered.inc(report.redelivered)
        self.swept.inc(report.swept)
        self.purged.inc(report.purged)
        self.last_success.set(time.time())


def registry_for(stores: Any, worker_metrics: WorkerMetrics | None = None) -> CollectorRegistry:
    """A registry with the stores' gauges, and the worker's metrics if given."""
    registry = worker_metrics.registry if worker_metrics is not None else CollectorRegistry()
    registry.register(StoreCollector(stores))
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
