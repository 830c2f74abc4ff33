"""HPC job mapping, the parse half: file names and file contents → jobs by GPU."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.jobmap import (
    INVALID,
    MAX_FILE_BYTES,
    MAX_JOB_ID_LENGTH,
    MAX_JOBS,
    NOT_UTF8,
    TOO_LARGE,
    TOO_LONG,
    TOO_MANY_JOBS,
    FileJobs,
    is_ignored,
    job_mapping,
    parse_jobs,
    parse_name,
)
from gpu_enricher.model import JobMapping


@pytest.mark.parametrize(
    ("name", "key"),
    [("0", (0, None)), ("7", (7, None)), ("15", (15, None)), ("3.0", (3, 0)), ("2.13", (2, 13)),
     # upstream's regex is ^\d+(\.\d+)?$: these it refuses too
     ("foo", None), ("bar.txt", None), ("1e5", None), ("NaN", None), ("+3", None), ("-2", None),
     (".5", None), ("1.2.3", None), ("3.", None), ("", None), (" 1", None), ("1\n", None),
     ("\u0661", None),  # an Arabic-Indic digit: \d in Python's re, not in Go's
     # a leading zero upstream accepts and then matches no GPU ("01" is no metric's gpu)
     ("01", None), ("1.01", None),
     ("99999", None)])  # bounded: no GPU index has five digits
def test_file_names(name: str, key: tuple[int, int | None] | None) -> None:
    assert parse_name(name) == key


def test_hidden_names_are_a_prologs_temporary_files() -> None:
    assert is_ignored(".0.tmp") and is_ignored(".") and not is_ignored("0")


def test_one_job_per_line_in_file_order_without_repeats() -> None:
    # upstream main: TestReadHPCMappingDeduplicatesJobsInOrder
    assert parse_jobs(b"job2\njob1\njob2\njob3\njob1\n").jobs == ("job2", "job1", "job3")


def test_whitespace_blank_lines_and_crlf() -> None:
    parsed = parse_jobs(b"  4242 \r\n\n\t\n4243\r\n   \n")
    assert parsed == FileJobs(("4242", "4243"), {})
    assert parse_jobs(b"").jobs == () and parse_jobs(b"\n\n").jobs == ()
    assert parse_jobs(b"4242").jobs == ("4242",), "no final newline"


def test_slurm_job_id_forms_are_kept() -> None:
    ids = ["4242", "4242_7", "4242_[1-3]", "4242+1", "4242.0", "user/run:3", "a@b=c"]
    assert parse_jobs("\n".join(ids).encode()).jobs == tuple(ids)


def test_bad_lines_are_skipped_and_counted_the_rest_kept() -> None:
    long = "9" * (MAX_JOB_ID_LENGTH + 1)
    parsed = parse_jobs(f'ok1\njob "quoted"\nback\\slash\ntwo words\nnul\0\n{long}\nok2\n'
                        "héllo\n".encode())
    assert parsed.jobs == ("ok1", "ok2")
    assert parsed.skipped == {INVALID: 5, TOO_LONG: 1}
    assert parsed.problem is None
    assert parse_jobs(("9" * MAX_JOB_ID_LENGTH).encode()).jobs == ("9" * MAX_JOB_ID_LENGTH,)


def test_jobs_per_gpu_are_capped() -> None:
    parsed = parse_jobs("\n".join(f"j{i}" for i in range(MAX_JOBS + 5)).encode())
    assert parsed.jobs == tuple(f"j{i}" for i in range(MAX_JOBS))
    assert parsed.skipped == {TOO_MANY_JOBS: 5}


def test_a_file_over_the_size_limit_or_not_utf8_is_left_out_whole() -> None:
    assert parse_jobs(b"1\n" * (MAX_FILE_BYTES // 2 + 1)) == FileJobs(problem=TOO_LARGE)
    assert parse_jobs(b"1\n" * (MAX_FILE_BYTES // 2)).jobs == ("1",)
    assert parse_jobs(b"4242\n\xff\xfe\n") == FileJobs(problem=NOT_UTF8)
    # a prolog writing in place, caught in the middle of a multi-byte character
    assert parse_jobs("job-é".encode()[:-1]).problem == NOT_UTF8


def test_mapping_keeps_usable_files_with_jobs() -> None:
    files = {(1, None): FileJobs(("b",)), (0, None): FileJobs(("a",)), (3, 0): FileJobs(("c",)),
             (2, None): FileJobs(()), (4, None): FileJobs(problem=NOT_UTF8)}
    mapping = job_mapping(files)
    assert mapping == JobMapping({(0, None): ("a",), (1, None): ("b",), (3, 0): ("c",)})
    assert list(mapping.jobs) == [(0, None), (1, None), (3, 0)]
    assert mapping.of(3, 0) == ("c",) and mapping.of(3, None) == () and mapping.of(9, None) == ()


@given(st.binary(max_size=4 * MAX_FILE_BYTES))
def test_any_bytes_parse_within_the_bounds(raw: bytes) -> None:
    parsed = parse_jobs(raw)
    assert len(parsed.jobs) <= MAX_JOBS
    assert len(set(parsed.jobs)) == len(parsed.jobs)
    for job in parsed.jobs:
        assert 0 < len(job) <= MAX_JOB_ID_LENGTH
        assert job.isascii() and job.isprintable() and not set(job) & set(' "\\')
