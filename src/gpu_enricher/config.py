"""Frozen, typed settings, built by the CLI from flags and environment variables."""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

BUILTIN_SCENARIO: Final = "builtin"


@dataclass(frozen=True, slots=True)
class Config:
    host: str | None  # None: every interface
    port: int
    collectors: Path
    collect_interval_ms: int
    hostname: str | None  # None with --no-hostname
    log_format: str = "text"
    debug: bool = False
    simulate: str | None = None  # None: real NVML; BUILTIN_SCENARIO or a YAML path

    @property
    def interval_seconds(self) -> float:
        return self.collect_interval_ms / 1000.0
