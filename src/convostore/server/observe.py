"""What operators watch: Prometheus metrics (``prometheus-client``, the ``metrics``
extra), OpenTelemetry spans (``opentelemetry-api``, the ``tracing`` extra) and access
logs. Each is there when its library is installed and costs nothing when it is not.

Metrics: ``convostore_http_requests_total{method,route,status}``,
``convostore_http_request_duration_seconds{method,route}``,
``convostore_open_streams`` and ``convostore_store_operation_seconds{operation}``.
Spans: one per `Store` operation the server calls, named ``convostore.<operation>``.
Access log: one record per request on the ``convostore.access`` logger, never the key
itself (its public id only) and never the query string (it may hold a user's words).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from convostore.store import Store

__all__ = ["ACCESS_LOG", "JsonFormatter", "Observer", "configure_logging"]

ACCESS_LOG = logging.getLogger("convostore.access")
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Observer:
    """The metrics registry of one app, its tracer, and the store seen through both."""

    def __init__(self) -> None:
        self.registry: Any = None
        self.tracer: Any = None
        self._requests: Any = None
        self._latency: Any = None
        self._streams: Any = None
        self._operations: Any = None
        try:
            import prometheus_client as prometheus
        except ImportError:
            pass
        else:
            self.registry = prometheus.CollectorRegistry()
            self._requests = prometheus.Counter(
                "convostore_http_requests",
                "HTTP requests answered, by route and status",
                ("method", "route", "status"),
                registry=self.registry,
            )
            self._latency = prometheus.Histogram(
                "convostore_http_request_duration_seconds",
                "Time to answer an HTTP request (a stream: until it ends)",
                ("method", "route"),
                buckets=_BUCKETS,
                registry=self.registry,
            )
            self._streams = prometheus.Gauge(
                "convostore_open_streams", "Live streams open now", registry=self.registry
            )
            self._operations = prometheus.Histogram(
                "convostore_store_operation_seconds",
                "Time of each Store operation the server calls",
                ("operation",),
                buckets=_BUCKETS,
                registry=self.registry,
            )
        self._trace: Any = None
        try:
            from opentelemetry import trace
        except ImportError:
            pass
        else:
            self._trace = trace
        self._provider: Any = None
        self._provider_tracer: Any = None

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        if self._requests is not None:
            self._requests.labels(method, route, str(status)).inc()
            self._latency.labels(method, route).observe(seconds)

    def stream_opened(self) -> None:
        if self._streams is not None:
            self._streams.inc()

    def stream_closed(self) -> None:
        if self._streams is not None:
            self._streams.dec()

    def exposition(self) -> tuple[bytes, str] | None:
        """The metrics in Prometheus' text format and its content type, if installed."""
        if self.registry is None:
            return None
        import prometheus_client as prometheus

        return prometheus.generate_latest(self.registry), prometheus.CONTENT_TYPE_LATEST

    def store(self, store: Store) -> Store:
        """``store`` itself when neither library is installed; else a view of it whose
        every operation is timed and traced."""
        if self._operations is None and self._trace is None and self.tracer is None:
            return store
        return cast(Store, _ObservedStore(store, self))

    def current_tracer(self) -> Any:
        """The tracer spans go to: the one set here, else the application's, once it
        has set a tracer provider (before that, no span is made: they would go nowhere)."""
        if self.tracer is not None or self._trace is None:
            return self.tracer
        provider = self._trace.get_tracer_provider()
        if provider is not self._provider:
            self._provider = provider
            proxy = isinstance(
                provider, self._trace.ProxyTracerProvider | self._trace.NoOpTracerProvider
            )
            self._provider_tracer = None if proxy else provider.get_tracer("convostore")
        return self._provider_tracer

    def operation(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        histogram = None if self._operations is None else self._operations.labels(name)
        span_name = f"convostore.{name}"

        @functools.wraps(call)
        async def observed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            tracer = self.current_tracer()
            try:
                if tracer is None:
                    return await call(*args, **kwargs)
                with tracer.start_as_current_span(span_name):
                    return await call(*args, **kwargs)
            finally:
                if histogram is not None:
                    histogram.observe(time.perf_counter() - started)

        return observed


class _ObservedStore:
    """A store whose coroutine methods go through `Observer.operation`; everything
    else is the store's own."""

    def __init__(self, store: Store, observer: Observer) -> None:
        self._store = store
        self._observer = observer
        self._wrapped: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        if wrapped is not None:
            return wrapped
        value = getattr(self._store, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(value):
            return value
        wrapped = self._observer.operation(name, value)
        self._wrapped[name] = wrapped
        return wrapped


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and an access record's
    ``http`` fields (`convostore serve --log-format json`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        http = getattr(record, "http", None)
        if isinstance(http, dict):
            entry.update(http)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(log_format: str, level: int = logging.INFO, *, access: bool = True) -> None:
    """Log convostore's and uvicorn's records to stderr, as text or JSON lines (times
    in UTC); ``access=False`` leaves the access log out."""
    handler = logging.StreamHandler()
    formatter: logging.Formatter
    if log_format == "json":
        formatter = JsonFormatter()
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    for name in ("convostore", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False
    ACCESS_LOG.setLevel(level if access else logging.WARNING)
