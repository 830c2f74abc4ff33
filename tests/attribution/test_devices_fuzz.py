"""The device-ID parser against any text (issue 13, fuzzing): a known form or None, never an
exception. A device ID comes from the kubelet, so anything a device plugin writes reaches it; an
exception would fail the whole pass."""

from hypothesis import example, given
from hypothesis import strategies as st

from gpu_enricher.attribution.devices import (
    attribute,
    held_here,
    node_index,
    parse_device_id,
    resolve,
)
from gpu_enricher.model import PodAssignment
from tests.attribution.test_devices import MIG1, MIG2, NODE, U0, U1, U2

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


# `held_here`, the kubelet thread's quick match (issue 26), against the join's own: the same
# answer for any text, for every form of this node's IDs in any case, with replica suffixes,
# whitespace, and for look-alikes of other nodes.
NODE_INDEX = node_index(NODE)
OURS = st.sampled_from([U0, U1, U2, MIG1, MIG2, U0.removeprefix("GPU-"), f"MIG-{U2}/1/0",
                        f"MIG-{U2}/9/0", "nvidia0", "nvidia1/vgpu2", "nvidia2/gi1", "nvidia7",
                        "GPU-8a748984-0fe7-297f-916c-4b998ce202d2", U0[:-1]])
OUR_FORMS = st.builds(lambda lead, ours, upper, tail: lead + (ours.upper() if upper else ours)
                      + tail, st.sampled_from(["", " ", "\t", "\u2003"]), OURS, st.booleans(),
                      st.sampled_from(["", "::", "::3", "::12", " ", "::x", "/1/0", "x"]))


@given(st.one_of(DEVICE_IDS, OUR_FORMS))
@example(U0.upper() + "::3")  # a replica of a GPU here, upper case
@example(f"MIG-{U2.upper()}/1/0")
@example("ΣGPU-x")
def test_held_here_says_what_parse_and_resolve_say(device_id: str) -> None:
    ref = parse_device_id(device_id)
    joined = ref is not None and resolve(ref, NODE_INDEX) is not None
    assert (held_here(device_id, NODE_INDEX) is not None) == joined, device_id
