"""The parse half of `-m/--configmap-data NAMESPACE:NAME`: the counters list kept in a
ConfigMap's `metrics` key, as dcgm-exporter reads it. Pure."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .events import JsonObject, mapping, resource_version, text

METRICS_KEY: Final = "metrics"
"""The key dcgm-exporter reads the counters CSV from."""


@dataclass(frozen=True, slots=True)
class ConfigMapRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ParsedConfigMap:
    namespace: str
    name: str
    data: Mapping[str, str]
    resource_version: str


def parse_config_map(obj: JsonObject) -> ParsedConfigMap | None:
    """A ConfigMap's string data (binaryData is not text and is left out)."""
    if not isinstance(obj, Mapping):
        return None
    metadata = mapping(obj.get("metadata"))
    data = {k: v for k, v in mapping(obj.get("data")).items()
            if isinstance(k, str) and isinstance(v, str)}
    return ParsedConfigMap(text(metadata.get("namespace")), text(metadata.get("name")), data,
                           resource_version(obj) or "")


def metrics_text(config_map: ParsedConfigMap | None, ref: ConfigMapRef) -> str:
    """The counters CSV of `config_map`; ValueError saying what is missing."""
    if config_map is None:
        raise ValueError(f"ConfigMap {ref} not found")
    if METRICS_KEY not in config_map.data:
        keys = ", ".join(sorted(config_map.data)) or "none"
        raise ValueError(f"ConfigMap {ref} has no key {METRICS_KEY!r} (its keys: {keys})")
    return config_map.data[METRICS_KEY]
