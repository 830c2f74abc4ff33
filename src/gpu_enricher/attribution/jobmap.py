"""HPC job mapping (`--hpc-job-mapping-dir`), the parse half: which file names count and what
a file says. Pure.

dcgm-exporter's hpc.go: a Slurm prolog writes, per GPU of a job, a file named `<gpu>` (the
GPU's index) or `<gpu>.<gpu instance>` (a MIG GPU instance's ID) holding one job ID per line;
every series of that GPU or instance is repeated once per job with an `hpc_job` attribute.
Where we differ, on purpose and bounded: a name with a leading zero (`01`) is refused (upstream
accepts it and then matches no GPU); lines are stripped and blank ones skipped (upstream would
print `hpc_job=""`, the same series twice); a repeated job ID counts once, as upstream's main
branch (`TestReadHPCMappingDeduplicatesJobsInOrder`); a job ID must be printable ASCII without
a quote or backslash (upstream prints the line raw into the exposition, where a `"` breaks the
scrape); and everything is capped so that a runaway prolog cannot blow memory or the pass.
"""

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ..model import JobMapping

MAX_ENTRIES: Final = 4096
"""Directory entries looked at per pass; more are left unread (and said so, once)."""
MAX_FILES: Final = 256
"""Mapping files used: 16 GPUs, each with its 7 GPU instances, twice over."""
MAX_FILE_BYTES: Final = 16 * 1024
"""A bigger file is skipped whole: 64 IDs of 128 characters fit twice."""
MAX_JOBS: Final = 64
"""Job IDs per GPU or GPU instance: each one repeats every series of that GPU."""
MAX_JOB_ID_LENGTH: Final = 128

# Why a file is skipped whole (the `reason` of gpu_enricher_hpc_job_mapping_skipped_files).
BAD_NAME: Final = "bad_name"
NOT_REGULAR: Final = "not_regular"
TOO_LARGE: Final = "too_large"
NOT_UTF8: Final = "not_utf8"
UNREADABLE: Final = "unreadable"
TOO_MANY_FILES: Final = "too_many_files"
# Why a line is skipped (…_skipped_job_ids).
INVALID: Final = "invalid"
TOO_LONG: Final = "too_long"
TOO_MANY_JOBS: Final = "too_many"

Key = tuple[int, int | None]
"""(GPU index, GPU instance ID or None for the whole GPU), as `JobMapping` keys its jobs."""

_NAME: Final = re.compile(r"(0|[1-9][0-9]{0,3})(?:\.(0|[1-9][0-9]{0,3}))?")
_JOB_ID: Final = re.compile(r"[!#-\[\]-~]+")  # printable ASCII but space, `"` and `\`


def is_ignored(name: str) -> bool:
    """A hidden name: the temporary file a prolog writes before renaming it into place."""
    return name.startswith(".")


def parse_name(name: str) -> Key | None:
    """`3` → (3, None), `3.1` → (3, 1); None for any other name."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return int(match[1]), None if match[2] is None else int(match[2])


@dataclass(frozen=True, slots=True)
class FileJobs:
    """What one mapping file says."""

    jobs: tuple[str, ...] = ()
    skipped: Mapping[str, int] = field(default_factory=dict)
    """Lines left out, by reason (INVALID, TOO_LONG, TOO_MANY_JOBS)."""
    problem: str | None = None
    """Why the whole file is left out (TOO_LARGE, NOT_UTF8); None: it is used."""


def parse_jobs(raw: bytes) -> FileJobs:
    """One job ID per line; surrounding whitespace and blank lines ignored, repeats kept once."""
    if len(raw) > MAX_FILE_BYTES:
        return FileJobs(problem=TOO_LARGE)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # also a multi-byte character cut by a writer in mid-write
        return FileJobs(problem=NOT_UTF8)
    jobs: dict[str, None] = {}  # insertion-ordered set
    skipped: Counter[str] = Counter()
    for line in text.split("\n"):
        job = line.strip()
        if not job or job in jobs:
            continue
        if len(job) > MAX_JOB_ID_LENGTH:
            skipped[TOO_LONG] += 1
        elif _JOB_ID.fullmatch(job) is None:
            skipped[INVALID] += 1
        elif len(jobs) == MAX_JOBS:
            skipped[TOO_MANY_JOBS] += 1
        else:
            jobs[job] = None
    return FileJobs(tuple(jobs), dict(skipped))


def _order(key: Key) -> tuple[int, int]:
    return key[0], -1 if key[1] is None else key[1]


def job_mapping(files: Mapping[Key, FileJobs]) -> JobMapping:
    """The usable files' jobs; an empty file maps nothing (upstream: no copy, the plain
    series)."""
    return JobMapping({key: files[key].jobs for key in sorted(files, key=_order)
                       if files[key].problem is None and files[key].jobs})
