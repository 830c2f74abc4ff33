"""The device-ID parser against any text (issue 13, fuzzing): a known form or None, never an
exception. A device ID comes from the kubelet, so anything a device plugin writes reaches it; an
exception would fail the whole pass."""

from hypothesis import example, given
from hypothesis import strategies as st

from gpu_enricher.attribution.devices import attribute, parse_device_id
from gpu_enricher.model import PodAssignment
from tests.attribution.test_devices import NODE

# Pieces of the real forms, so the search reaches deep into the patterns.
PIECES = st.sampled_from(["GPU-", "MIG-", "nvidia", "/gi", "/vgpu", "::", "/", "-", "0", "7",
                          "8a748984-0fe7-297f-916c-4b998ce202d1", "٣", "\n", " "])
DEVICE_IDS = st.one_of(st.text(), st.lists(PIECES, max_size=12).map("".join))


@given(DEVICE_IDS)
@example("nvidia" + "1" * 5000)  # int() refuses over 4,300 digits
@example("MIG-GPU-8a748984/1/" + "9" * 5000)
@example("nvidia٣")  # a non-ASCII digit
def test_any_device_id_parses_to_a_form_or_none(device_id: str) -> None:
    ref = parse_device_id(device_id)
    if ref is not None:
        for number in (ref.minor, ref.gpu_instance):
            assert number is None or 0 <= number < 10**9


@given(st.lists(DEVICE_IDS, max_size=5))
@example(["nvidia" + "1" * 5000, "GPU-x::" + "1" * 5000])
def test_any_device_ids_attribute_without_an_exception(device_ids: list[str]) -> None:
    assignment = PodAssignment("ns", "pod", "ctr", "nvidia.com/gpu", tuple(device_ids))
    result = attribute(NODE, [assignment])
    assert set(result.unmatched) <= {d for d in device_ids}
