"""The fake Kubernetes API server the tests of this folder talk to (a test file may override
`api` with other served versions)."""

from collections.abc import AsyncIterator

import pytest

from gpu_enricher.sim.fake_api.server import FakeKubeApi


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeApi]:
    async with FakeKubeApi() as fake:
        yield fake
