"""The energy families as Prometheus reads them: a pod's series with its MIG instance's labels,
the unattributed ones by reason, `--drop-labels` taking UUID and GPU_I_PROFILE off only; a view
kept across passes shows each pass's values and, once told the members changed, the new series."""

from gpu_enricher.attribution.energy import Payer
from gpu_enricher.exposition.chargeback import EnergyAccount, EnergyView, energy_families
from gpu_enricher.exposition.render import render_text
from tests.samples import samples

ACCOUNT = EnergyAccount(1, "GPU-b", {1: "3g.40gb"}, {
    ("ml", "trainer", "main", 1): 1234.5, ("ml", "web", "nginx", None): 2.0,
    "idle": 10.25, "host": 0.0})


def test_pod_and_unattributed_series_carry_their_gpu_instance_and_reason() -> None:
    body = render_text(energy_families([ACCOUNT])).decode()
    pods = {tuple(sorted(s.labels.items())): s.value
            for s in samples(body, "gpu_enricher_pod_energy_joules_total")}
    assert pods == {
        (("GPU_I_ID", "1"), ("GPU_I_PROFILE", "3g.40gb"), ("UUID", "GPU-b"),
         ("container", "main"), ("gpu", "1"), ("namespace", "ml"), ("pod", "trainer")): 1234.5,
        (("UUID", "GPU-b"), ("container", "nginx"), ("gpu", "1"), ("namespace", "ml"),
         ("pod", "web")): 2.0}
    reasons = {s.labels["reason"]: s.value
               for s in samples(body, "gpu_enricher_unattributed_energy_joules_total", gpu="1")}
    assert reasons == {"idle": 10.25, "host": 0.0}
    assert "# TYPE gpu_enricher_pod_energy_joules_total counter" in body


def test_drop_labels_takes_off_uuid_and_the_profile_only() -> None:
    body = render_text(energy_families([ACCOUNT], frozenset({"UUID", "GPU_I_PROFILE"}))).decode()
    trainer = samples(body, "gpu_enricher_pod_energy_joules_total", pod="trainer")[0]
    assert set(trainer.labels) == {"gpu", "GPU_I_ID", "namespace", "pod", "container"}
    assert all("UUID" not in s.labels
               for s in samples(body, "gpu_enricher_unattributed_energy_joules_total"))


def test_a_view_shows_new_values_and_new_series_once_told() -> None:
    totals: dict[Payer, float] = {("ml", "web", "nginx", None): 2.0, "idle": 1.0}
    account = EnergyAccount(0, "GPU-a", {}, totals)
    view = EnergyView()

    def shown() -> dict[str, float]:
        body = render_text(view.families([account], members)).decode()
        return {s.labels.get("pod", s.labels.get("reason", "")): s.value
                for name in ("gpu_enricher_pod_energy_joules_total",
                             "gpu_enricher_unattributed_energy_joules_total")
                for s in samples(body, name)}

    members = 1
    assert shown() == {"web": 2.0, "idle": 1.0}
    totals[("ml", "web", "nginx", None)] = 7.5  # the counter moved: the same series
    assert shown() == {"web": 7.5, "idle": 1.0}
    totals[("ml", "db", "pg", None)] = 0.0  # a series starts: the book moves its members
    del totals["idle"]
    members = 2
    assert shown() == {"web": 7.5, "db": 0.0}
    assert [f.samples for f in view.families([account], members)] == \
        [f.samples for f in energy_families([account])], "as labelled afresh"


def test_containers_and_people_outside_pods_have_series_of_their_own() -> None:
    """A host without Kubernetes (issue 34): `container` alone, or `user`, in the same family."""
    account = EnergyAccount(0, "GPU-a", {3: "1g.10gb"}, {
        ("container", "notebook", None): 40.0, ("user", "alice", 3): 2.5, "idle": 1.0})
    body = render_text(energy_families([account])).decode()
    found = {tuple(sorted(s.labels.items())): s.value
             for s in samples(body, "gpu_enricher_pod_energy_joules_total")}
    assert found == {
        (("UUID", "GPU-a"), ("container", "notebook"), ("gpu", "0")): 40.0,
        (("GPU_I_ID", "3"), ("GPU_I_PROFILE", "1g.10gb"), ("UUID", "GPU-a"), ("gpu", "0"),
         ("user", "alice")): 2.5}
