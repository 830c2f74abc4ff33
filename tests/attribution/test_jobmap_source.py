"""HPC job mapping, the fetch half and the source, on real directories."""

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric

from gpu_enricher.attribution.jobmap import MAX_FILE_BYTES, MAX_FILES
from gpu_enricher.attribution.jobmap_reader import SETTLE_NS, DirectoryError, JobMapReader
from gpu_enricher.attribution.jobmap_source import JobMapSource
from gpu_enricher.model import JobMapping

LATER = time.time_ns() + 3600 * 10**9
"""A clock an hour ahead: every file is settled, so only a real change is read again."""


def settled_source(directory: Path) -> JobMapSource:
    return JobMapSource(directory, JobMapReader(directory, clock=lambda: LATER))


def refresh(source: JobMapSource) -> JobMapping:
    asyncio.run(source.refresh(None))
    return source.snapshot()


def samples(families: list[Metric], name: str) -> dict[str, float]:
    family = next(f for f in families if f.name == name)
    return {s.labels.get("reason", ""): s.value for s in family.samples}


def test_files_become_jobs_by_gpu_and_gpu_instance(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4242\n")
    (tmp_path / "1").write_text("4243\n4244\n")
    (tmp_path / "3.0").write_text("4245")
    mapping = refresh(settled_source(tmp_path))
    assert mapping.jobs == {(0, None): ("4242",), (1, None): ("4243", "4244"), (3, 0): ("4245",)}


def test_an_unchanged_directory_is_not_read_again(tmp_path: Path) -> None:
    for gpu in range(8):
        (tmp_path / str(gpu)).write_text(f"{gpu}00\n")
    source = settled_source(tmp_path)
    first = refresh(source)
    assert source.reader.reads == 8
    assert refresh(source) is first, "the same snapshot object: nothing changed"
    assert source.reader.reads == 8
    # a rewrite in place (same size) changes the mtime: that file alone is read again
    path = tmp_path / "5"
    path.write_text("501\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    mapping = refresh(source)
    assert source.reader.reads == 9
    assert mapping.of(5, None) == ("501",) and mapping.of(4, None) == ("400",)


def test_a_file_changed_within_the_settle_time_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1\n")
    now = time.time_ns()
    source = JobMapSource(tmp_path, JobMapReader(tmp_path, clock=lambda: now))
    refresh(source)
    refresh(source)
    assert source.reader.reads == 2, "its mtime is too recent to prove a later write changed it"
    source.reader._clock = lambda: now + SETTLE_NS + 10**9
    refresh(source)
    refresh(source)
    assert source.reader.reads == 3


def test_files_come_and_go(tmp_path: Path) -> None:
    source = settled_source(tmp_path)
    assert refresh(source).jobs == {}
    (tmp_path / "2").write_text("a\n")
    assert refresh(source).jobs == {(2, None): ("a",)}
    (tmp_path / "2").unlink()
    assert refresh(source).jobs == {}


def test_a_prologs_renamed_temporary_file(tmp_path: Path) -> None:
    source = settled_source(tmp_path)
    (tmp_path / ".0.tmp").write_text("77\n")
    assert refresh(source).jobs == {}
    assert samples(source.families(), "gpu_enricher_hpc_job_mapping_skipped_files") == {}
    os.rename(tmp_path / ".0.tmp", tmp_path / "0")
    assert refresh(source).jobs == {(0, None): ("77",)}


def test_bad_files_are_skipped_logged_once_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "0").write_text("good\n")
    (tmp_path / "1").write_bytes(b"\xff\xfe")
    (tmp_path / "2").mkdir()
    (tmp_path / "3").write_text("x\n" * MAX_FILE_BYTES)
    (tmp_path / "4").symlink_to(tmp_path / "2")
    os.mkfifo(tmp_path / "5")  # never opened: it would block until a writer came
    (tmp_path / "gpu0").write_text("x\n")
    (tmp_path / "6").write_text('fine\nbad "id"\n')
    source = settled_source(tmp_path)
    with caplog.at_level(logging.WARNING):
        mapping = refresh(source)
        refresh(source)
    assert mapping.jobs == {(0, None): ("good",), (6, None): ("fine",)}
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert sorted(skipped) == sorted(f"HPC job mapping: skipping {tmp_path / n} ({r})" for n, r in
                                     [("1", "not_utf8"), ("2", "not_regular"),
                                      ("3", "too_large"), ("4", "not_regular"),
                                      ("5", "not_regular"), ("gpu0", "bad_name")])
    assert [r.getMessage() for r in caplog.records if "lines skipped" in r.getMessage()] == [
        f"HPC job mapping: {tmp_path / '6'}: lines skipped: 1 invalid"]
    families = source.families()
    assert samples(families, "gpu_enricher_hpc_job_mapping_skipped_files") == {
        "bad_name": 1, "not_regular": 3, "not_utf8": 1, "too_large": 1}
    assert samples(families, "gpu_enricher_hpc_job_mapping_skipped_job_ids") == {"invalid": 1}
    assert samples(families, "gpu_enricher_hpc_job_mapping_files") == {"": 2}
    # fixed: counted no more; broken again: logged again
    (tmp_path / "1").write_text("ok\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert refresh(source).of(1, None) == ("ok",)
        (tmp_path / "1").write_bytes(b"\xff")
        os.utime(tmp_path / "1", ns=(0, time.time_ns() + 10**9))
        refresh(source)
    assert [r.getMessage() for r in caplog.records] == [
        f"HPC job mapping: skipping {tmp_path / '1'} (not_utf8)"]


def test_too_many_files(tmp_path: Path) -> None:
    for index in range(MAX_FILES + 3):
        (tmp_path / f"{index // 8}.{index % 8}").write_text("j\n")
    source = settled_source(tmp_path)
    assert len(refresh(source).jobs) == MAX_FILES
    assert samples(source.families(),
                   "gpu_enricher_hpc_job_mapping_skipped_files") == {"too_many_files": 3}


def test_a_missing_directory_maps_nothing_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "job-mapping"
    source = settled_source(directory)
    with caplog.at_level(logging.WARNING):
        assert refresh(source).jobs == {}
        refresh(source)
    assert len(caplog.records) == 1
    assert "cannot list the HPC job mapping directory" in caplog.text
    health = source.health()
    assert not health.up and health.errors == {"no_directory": 2}
    directory.mkdir()
    (directory / "0").write_text("9\n")
    assert refresh(source).jobs == {(0, None): ("9",)}
    assert source.health().up
    (directory / "0").unlink()
    directory.rmdir()
    assert refresh(source).jobs == {}, "gone with its directory, as upstream's labels"


def test_the_directory_must_be_one(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DirectoryError, match="not a directory"):
        JobMapReader(tmp_path / "file").read()


def test_a_read_still_running_keeps_the_last_jobs(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1\n")
    source = settled_source(tmp_path)
    before = refresh(source)
    with source._reading:  # as a read stuck in the kernel holds it
        assert refresh(source) is before
    assert source.health().errors == {"busy": 1}


def test_the_file_cap_counts_bad_files_too(tmp_path: Path) -> None:
    """The cap bounds the reads: files that turn out bad still count towards it."""
    for gpu in range(MAX_FILES):
        (tmp_path / str(gpu)).write_bytes(b"\xff")
    (tmp_path / "9999").write_text("late\n")  # sorts after every other name
    source = settled_source(tmp_path)
    assert refresh(source).jobs == {}
    assert source.reader.reads == MAX_FILES
    assert samples(source.families(), "gpu_enricher_hpc_job_mapping_skipped_files") == {
        "not_utf8": MAX_FILES, "too_many_files": 1}


def test_a_half_written_file_costs_only_its_own_gpu(tmp_path: Path) -> None:
    """A prolog writing in place, caught in the middle of a multi-byte character."""
    (tmp_path / "0").write_text("4242\n")
    (tmp_path / "1").write_bytes("jöb-7".encode()[:2])
    source = JobMapSource(tmp_path, JobMapReader(tmp_path))  # the real clock: just written
    assert refresh(source).jobs == {(0, None): ("4242",)}
    (tmp_path / "1").write_text("job-7\n")  # finished (an ASCII ID this time)
    assert refresh(source).jobs == {(0, None): ("4242",), (1, None): ("job-7",)}
