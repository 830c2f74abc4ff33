"""exposition/shape.py: dcgm-exporter 4.8.4's `-d` grammar and errors, the entities it selects,
and the spellings of `-rbmn` and `-o`."""

import pytest

from gpu_enricher.exposition.shape import (
    FLEX,
    DeviceOptionError,
    DeviceSelection,
    LabelStyle,
    dashed,
    monitored,
    parse_selection,
    unmatched,
)
from gpu_enricher.model import DeviceIdentity, GpuInstance, GpuSnapshot, NodeSnapshot


@pytest.mark.parametrize(("text", "selection"), [
    ("f", FLEX),
    ("g", DeviceSelection(gpus=True)),
    ("i", DeviceSelection(instances=True)),
    ("g:0,2-4", DeviceSelection(gpus=True, gpu_ids=(0, 2, 3, 4))),
    ("i:0,2-4", DeviceSelection(instances=True, instance_ids=(0, 2, 3, 4))),
    ("g+i", DeviceSelection(True, None, True, None)),
    ("i:7+g:1", DeviceSelection(True, (1,), True, (7,))),
    ("g:3-3,007", DeviceSelection(gpus=True, gpu_ids=(3, 7))),
])
def test_the_grammar(text: str, selection: DeviceSelection) -> None:
    assert parse_selection(text) == selection


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid device option '': empty selector"),
    ("g+", "invalid device option 'g+': empty selector"),
    ("g:0:1", "invalid ranged device option 'g:0:1': there can only be one specified range"),
    ("f+g", "the flex option 'f' cannot be combined with other device options"),
    ("f:0", "no range can be specified with the flex option 'f'"),
    ("g+g:1", "duplicate device option 'g'"),
    ("x", "the only valid options are 'f', 'g', or 'i', but found 'x'"),
    ("G", "the only valid options are 'f', 'g', or 'i', but found 'G'"),
    ("c:0", "the only valid options are 'f', 'g', or 'i', but found 'c'"),
    ("g:", 'strconv.Atoi: parsing "": invalid syntax'),
    ("g:a", 'strconv.Atoi: parsing "a": invalid syntax'),
    ("g: 1", 'strconv.Atoi: parsing " 1": invalid syntax'),
    ("g:-1", 'strconv.Atoi: parsing "": invalid syntax'),
    ("i:1-2-3", "range can only be '<number>-<number>', but found '1-2-3'"),
    ("i:4-2", "invalid range '4-2': start (4) must not exceed end (2)"),
    ("g:0-1024", "device selector expands to more than 1024 indices"),
    ("g:99999999999999999999", 'strconv.Atoi: parsing "99999999999999999999": value out of '
                               "range"),
])
def test_dcgm_exporters_errors(text: str, message: str) -> None:
    with pytest.raises(DeviceOptionError) as err:
        parse_selection(text)
    assert str(err.value) == message


def _instance(gi: int, entity: int) -> GpuInstance:
    return GpuInstance(gi, 0, "1g.10gb", f"MIG-{gi}", entity_id=entity)


def _gpu(index: int, *instances: GpuInstance, healthy: bool = True) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, f"GPU-{index}", "", "m"), healthy,
                       mig_enabled=bool(instances), instances=instances)


NODE = NodeSnapshot((_gpu(0), _gpu(1, _instance(1, 8), _instance(5, 7)), _gpu(2),
                     _gpu(3, healthy=False)))


def _names(selection: DeviceSelection) -> list[str]:
    return [f"{gpu.identity.index}" + (f"/{inst.gpu_instance_id}" if inst else "")
            for gpu, inst in monitored(NODE, selection)]


def test_selected_entities_in_dcgm_exporters_order() -> None:
    assert _names(FLEX) == ["0", "1/1", "1/5", "2"]
    assert _names(parse_selection("g")) == ["0", "1", "2"], "a lost GPU has no series"
    assert _names(parse_selection("i")) == ["1/1", "1/5"]
    assert _names(parse_selection("g:2,0+i:7")) == ["2", "0", "1/5"], "the order given"


def test_ids_matching_nothing_or_twice_select_nothing_more() -> None:
    assert _names(parse_selection("g:0,0,3,9")) == ["0"], "3 is lost, 9 absent"
    assert _names(parse_selection("i:7,7,0")) == ["1/5"]


def test_unmatched_ids_are_named_as_given() -> None:
    assert unmatched(NODE, parse_selection("g:0,3,9+i:7,8,9")) == ["g:9", "i:9"]
    assert unmatched(NODE, parse_selection("g+i")) == []


def test_model_names_dashed_as_go_strings_fields() -> None:
    assert dashed("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert dashed("  Tesla\tV100-SXM2  16GB \u00a0") == "Tesla-V100-SXM2-16GB"
    assert dashed("NVIDIA\x1cL4") == "NVIDIA\x1cL4", "not a space to Go (str.split says it is)"


def test_styles_rename_only_uuid_and_the_pod_attributes() -> None:
    pairs = [("gpu", "0"), ("UUID", "GPU-0"), ("modelName", "NVIDIA L4"), ("pod", "p"),
             ("namespace", "n"), ("container", "c"), ("pod_uid", "u"), ("vgpu", "1")]
    assert LabelStyle().pairs(pairs) == pairs
    assert LabelStyle(dashed_model_names=True, old_namespace=True).pairs(pairs) == [
        ("gpu", "0"), ("uuid", "GPU-0"), ("modelName", "NVIDIA-L4"), ("pod_name", "p"),
        ("pod_namespace", "n"), ("container_name", "c"), ("pod_uid", "u"), ("vgpu", "1")]
