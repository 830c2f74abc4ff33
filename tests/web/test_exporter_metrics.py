"""dcgm-exporter's --enable-exporter-metrics (DCGM_EXPORTER_ENABLE_EXPORTER_METRICS): HTTP
requests counted by handler and status code, the process's own metrics being always there;
without it, no request counts. The real process."""

import time

from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture
from tests.samples import samples, value


def scraped_until(exp: Exporter, name: str, **labels: str) -> str:
    """/metrics once it carries the sample (counts are rendered with the next pass)."""
    deadline = time.monotonic() + 10
    while True:
        body = get(exp.base + "/metrics")[1]
        if value(body, name, **labels) is not None or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_requests_are_counted_by_handler_and_code_when_asked(
        exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "100"], {"DCGM_EXPORTER_ENABLE_EXPORTER_METRICS": "true"})
    exporters.append(exp)
    exp.wait_ready()
    for path in ("/health", "/health", "/nope/1", "/nope/2", "/api/v1/gpus"):
        get(exp.base + path)
    scraped_until(exp, "gpu_enricher_http_requests_total", handler="other", code="404")
    # A scrape is counted in the bytes of a later pass: the first may not show itself yet.
    body = scraped_until(exp, "gpu_enricher_http_requests_total", handler="/metrics", code="200")
    counted = {(s.labels["handler"], s.labels["code"])
               for s in samples(body, "gpu_enricher_http_requests_total")}
    assert {("/health", "200"), ("/api/v1/gpus", "200"), ("/metrics", "200"),
            ("/ready", "200"), ("other", "404")} <= counted, counted
    assert value(body, "gpu_enricher_http_requests_total", handler="/health", code="200") == 2
    assert value(body, "gpu_enricher_http_requests_total", handler="other", code="404") == 2
    assert value(body, "process_resident_memory_bytes") is not None
    code, err = exp.stop()
    assert code == 0 and " WARNING " not in err, err


def test_without_it_no_request_is_counted(exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "100"], {})
    exporters.append(exp)
    exp.wait_ready()
    get(exp.base + "/health")
    time.sleep(0.3)  # a few passes
    body = get(exp.base + "/metrics")[1]
    assert "gpu_enricher_http_requests" not in body
    assert value(body, "process_resident_memory_bytes") is not None

