"""collector/pacing.py on its own: the first picture's bounded wait for the labelling
sources, and the renders a source's news asks for between passes (issue 32)."""

import asyncio
import time
from dataclasses import dataclass

import pytest

from gpu_enricher.collector.pacing import NewsWait, first_picture, still_missing
from gpu_enricher.model import NodeSnapshot, SourceHealth


@dataclass
class Listing:
    """A source whose first answer may not be in yet (sources.Initial)."""

    name: str
    listed: bool = False
    after_gpus = False

    async def start(self) -> None: ...
    async def refresh(self, gpus: NodeSnapshot | None) -> None: ...
    def snapshot(self) -> object: return None
    def health(self) -> SourceHealth: return SourceHealth(up=True)
    def families(self) -> list[object]: return []
    async def close(self) -> None: ...


def done() -> "asyncio.Future[None]":
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


async def test_a_whole_picture_does_not_wait() -> None:
    waited = await first_picture(done(), lambda: [], asyncio.Event(), time.perf_counter(), 5,
                                 _nothing)
    assert waited < 0.5


async def _nothing() -> None:
    return None


async def test_it_waits_for_the_source_that_answers_then_renders_at_once() -> None:
    pods = Listing("kubernetes")
    news = asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, lambda: (setattr(pods, "listed", True),
                                                        news.set()))
    waited = await first_picture(done(), lambda: still_missing([pods]), news,
                                 time.perf_counter(), 5, _nothing)
    assert 0.15 < waited < 2.0 and pods.listed


async def test_the_bound_holds_for_a_source_that_never_answers_and_says_which(
        caplog: pytest.LogCaptureFixture) -> None:
    waited = await first_picture(done(), lambda: still_missing([Listing("kubernetes"),
                                                                Listing("proc", True)]),
                                 asyncio.Event(), time.perf_counter(), 0.3, _nothing)
    assert 0.25 < waited < 2.0
    (line,) = [r.getMessage() for r in caplog.records]
    assert "without the first answer of: kubernetes (" in line


async def test_the_pass_s_own_refreshes_count_until_done() -> None:
    rest: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.2, rest.set_result, None)
    await first_picture(rest, lambda: [], asyncio.Event(), time.perf_counter(), 5, _nothing)
    assert rest.done()
    slow: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waited = await first_picture(slow, lambda: [], asyncio.Event(), time.perf_counter(), 0.2,
                                 _nothing)
    assert waited >= 0.2 and not slow.done()
    slow.cancel()


async def test_news_after_the_pass_reads_again_what_it_may_complete() -> None:
    """The claims' client finishes loading after the pass read the claims: `again` reads them,
    and the picture is whole."""
    claims = Listing("resourceclaims")
    news = asyncio.Event()
    reads: list[float] = []

    async def again() -> None:
        reads.append(time.monotonic())
        claims.listed = True

    asyncio.get_running_loop().call_later(0.1, news.set)
    await first_picture(done(), lambda: still_missing([claims]), news, time.perf_counter(), 5,
                        again)
    assert claims.listed and len(reads) == 1 and not news.is_set()


async def test_news_between_passes_renders_at_most_every_gap_and_never_delays_the_pass(
) -> None:
    renders: list[float] = []
    news = asyncio.Event()

    async def render() -> None:
        renders.append(time.monotonic())

    wait = NewsWait(news, render, gap=0.2)
    wait.rendered()  # the pass just rendered
    loop = asyncio.get_running_loop()
    for at in (0.01, 0.02, 0.05, 0.3, 0.31):  # two bursts
        loop.call_later(at, news.set)
    started = time.monotonic()
    await wait.until(asyncio.sleep(0.7))  # the next pass is due at 0.7 s
    elapsed = time.monotonic() - started
    assert 0.65 < elapsed < 1.0, "the pass is never held back"
    assert len(renders) == 2 and wait.renders == 2, renders
    assert renders[1] - renders[0] >= 0.19, "one render per burst, the gap apart"
    assert renders[0] - started >= 0.19, "not sooner than the gap after the pass's render"
