"""/metrics with ``prometheus_client``: request counts and latencies (observed by the Guard), and at each scrape the
served model's batching statistics and queue depth, read from the core's counters by a collector.

The names are bertkit's since the first server (docs/serving.md): ``bertkit_requests_total{path,status}``,
``bertkit_request_duration_seconds`` (histogram), ``bertkit_inputs_total{model}``, ``bertkit_batches_total``,
``bertkit_batch_failures_total``, ``bertkit_batch_inputs_total``, ``bertkit_tokens_total``,
``bertkit_padded_tokens_total``, ``bertkit_forward_seconds_total``, ``bertkit_malloc_trims_total``,
``bertkit_batch_size`` (histogram), ``bertkit_queue_depth``, ``bertkit_uptime_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from bertkit.serve.core.service import Service

CONTENT_TYPE = CONTENT_TYPE_LATEST
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The server's metrics: one registry per app (two apps in one process keep their own counts)."""

    def __init__(self, services: dict[str, Service]) -> None:
        self.services = services
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "bertkit_requests", "HTTP requests by path and status.", ["path", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "bertkit_request_duration_seconds",
            "Request latency by path.",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        started = time.time()
        uptime = Gauge("bertkit_uptime_seconds", "Seconds since start.", registry=self.registry)
        uptime.set_function(lambda: time.time() - started)

    def observe(self, path: str, status: int, seconds: float) -> None:
        self.requests.labels(path, str(status)).inc()
        self.latency.labels(path).observe(seconds)

    def total_requests(self) -> int:
        """Requests answered so far, every path and status (bert-as-service's ``num_request``)."""
        return int(sum(s.value for m in self.requests.collect() for s in m.samples if s.name.endswith("_total")))

    def render(self, service: Service) -> bytes:
        """The exposition text: the registry's metrics, then the inputs of every model and ``service``'s batches."""
        return generate_latest(self.registry) + generate_latest(_Scrape(self.services, service))


class _Scrape:
    """A collector read at scrape time: inputs per model, and one model's batching worker (its ``Stats``)."""

    def __init__(self, services: dict[str, Service], service: Service) -> None:
        self.services, self.service = services, service

    def collect(self) -> Iterator[Metric]:
        inputs = CounterMetricFamily("bertkit_inputs", "Inputs received, by model.", labels=["model"])
        for name, svc in self.services.items():
            inputs.add_metric([name], svc.inputs_total)
        yield inputs
        queue = self.service.queue
        s = queue.stats
        with s.lock:
            counters: list[tuple[str, str, Any]] = [
                ("bertkit_batches", "Forward passes run by the batching worker.", s.batches),
                (
                    "bertkit_batch_failures",
                    "Batches that failed (their requests were retried alone).",
                    s.failed_batches,
                ),
                ("bertkit_batch_inputs", "Inputs embedded.", s.batch_inputs),
                ("bertkit_tokens", "Real tokens run through the model.", s.batch_tokens),
                ("bertkit_padded_tokens", "Tokens run including padding.", s.padded_tokens),
                ("bertkit_forward_seconds", "Time spent in forward passes.", s.forward_seconds),
                ("bertkit_malloc_trims", "Times freed memory was handed back to the OS (malloc_trim).", s.trims),
            ]
            cumulative, buckets = 0, []
            for bound in s.BUCKETS:
                cumulative += s.batch_size_buckets.get(bound, 0)
                buckets.append((str(bound), cumulative))
            buckets.append(("+Inf", s.batches))
            sizes = HistogramMetricFamily(
                "bertkit_batch_size", "Inputs per forward pass.", buckets=buckets, sum_value=s.batch_inputs
            )
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=value)
        yield sizes
        yield GaugeMetricFamily("bertkit_queue_depth", "Inputs waiting for a batch.", value=queue.depth)
