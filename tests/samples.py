"""Read samples out of a text exposition the way Prometheus does: by name and labels, whatever
the label order or number format (our self-metrics are rendered by prometheus_client)."""

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples(body: str, name: str, **labels: str) -> list[Sample]:
    """Every sample called `name` whose labels include `labels`."""
    return [s for family in text_string_to_metric_families(body) for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(body: str, name: str, **labels: str) -> float | None:
    """The one sample's value; None when there is none; AssertionError when ambiguous."""
    found = samples(body, name, **labels)
    assert len(found) <= 1, (name, labels, found)
    return found[0].value if found else None
