"""One picture of the node: every source's snapshot joined (`cycle.compose`, pure), the per-pod
accounts stepped, the DCGM families rendered by our renderer and the exporter's own by
prometheus_client, and the query API's document encoded. The collector paints one per pass,
and one between passes when a source's news completes what the last one lacked (issue 32).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from ..exposition.ownmetrics import OwnMetrics
from ..exposition.query import Document, encode, with_accounts
from ..exposition.render import Exposition, SampleLines
from ..exposition.selfmetrics import allocation_family, claim_family, self_families
from ..exposition.shape import unmatched
from ..model import SourceHealth
from .accounts import PodAccounts
from .cycle import CycleInputs, JoinOptions, compose
from .news import Unmatched


@dataclass(frozen=True, slots=True)
class Picture:
    exposition: Exposition
    document: Document
    document_body: bytes | None
    """`document` encoded once, when it was asked of the picture before (the query API, the
    `inspect` command): the unfiltered answer is bytes ready to serve; None: not encoded (an
    exporter that only Prometheus scrapes never encodes it, issue 33)."""


class Painter:
    """Keeps what a picture carries from the one before: the per-pod accounts, the names that
    matched nothing (logged once), prometheus_client's registry, each family's sample lines."""

    def __init__(self, join: JoinOptions, accounts: PodAccounts, backend_name: str) -> None:
        self.join = join
        self.accounts = accounts
        self._backend_name = backend_name
        self._unmatched = Unmatched()
        self._own = OwnMetrics()
        self._lines = SampleLines()

    def paint(self, inputs: CycleInputs, health: Mapping[str, SourceHealth],
              own_extra: list[Metric], encode_document: bool = True) -> Picture:
        joined = compose(inputs, self.join)
        families = [*joined.families, *self.accounts.families(inputs, joined)]
        node = inputs.node
        own = self_families(node, health, self.join.hostname, self._backend_name)
        self._unmatched.report(
            joined.attribution.unmatched if joined.attribution is not None else (),
            joined.claims.unresolved if joined.claims is not None else {},
            unmatched(node, self.join.devices) if node is not None else ())
        if joined.attribution is not None and node is not None:
            own.append(allocation_family(
                node, joined.attribution,
                joined.claims.monitors if joined.claims is not None else None))
        if joined.claims is not None:
            own += claim_family(joined.claims.claimed, joined.claims.unresolved)
        own += own_extra
        document = with_accounts(joined.document, self.accounts.billed())
        return Picture(Exposition.from_families(families, self._own.render(own), self._lines),
                       document, encode(document) if encode_document else None)
