"""dcgm-exporter's flags that change the output's shape: which entities get series (`-d`), how
`modelName` is spelled (`-rbmn`) and which label names the pod and UUID labels take (`-o`).

`-d` follows dcgm-exporter 4.8.4 (pkg/cmd/app.go `parseDeviceOptions`, internal/pkg/
devicemonitoring `GetMonitoredEntities`): `f` (the default) is every GPU instance of a GPU that
has some and every other GPU whole; otherwise `g[:IDS]` selects whole GPUs by index (a MIG GPU
too, as one GPU, without GPU_I_* labels) and `i[:IDS]` GPU instances by DCGM's GPU-instance
entity id (`GpuInstance.entity_id`), `g…+i…` both: the GPUs first, then the instances. Pure.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..fields import names
from ..model import GpuInstance, GpuSnapshot, NodeSnapshot

MAX_INDICES: Final = 1024
"""dcgm-exporter caps an id list at DCGM_MAX_NUM_CPU_CORES indices."""


class DeviceOptionError(ValueError):
    """A `-d` value dcgm-exporter refuses; the message is its own."""


@dataclass(frozen=True, slots=True)
class DeviceSelection:
    """A parsed `-d`. Neither `gpus` nor `instances` set: `f`."""

    gpus: bool = False
    gpu_ids: tuple[int, ...] | None = None
    """None: every GPU (`g`); else these indices in the order given (`g:0,2-3`)."""
    instances: bool = False
    instance_ids: tuple[int, ...] | None = None
    """None: every GPU instance (`i`); else these DCGM entity ids in the order given."""

    @property
    def flex(self) -> bool:
        return not self.gpus and not self.instances


FLEX: Final = DeviceSelection()


def _atoi(text: str) -> int:
    """Go's strconv.Atoi, as dcgm-exporter reads an id, with its error text."""
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        raise DeviceOptionError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise DeviceOptionError(f'strconv.Atoi: parsing "{text}": value out of range')
    return value


def _ids(spec: str) -> tuple[int, ...]:
    ids: list[int] = []
    too_many = f"device selector expands to more than {MAX_INDICES} indices"
    for item in spec.split(","):
        bounds = item.split("-")
        if len(bounds) == 1:
            if len(ids) >= MAX_INDICES:
                raise DeviceOptionError(too_many)
            ids.append(_atoi(bounds[0]))
        elif len(bounds) == 2:
            start, end = _atoi(bounds[0]), _atoi(bounds[1])
            if start > end:
                raise DeviceOptionError(
                    f"invalid range '{item}': start ({start}) must not exceed end ({end})")
            if len(ids) + end - start + 1 > MAX_INDICES:
                raise DeviceOptionError(too_many)
            ids.extend(range(start, end + 1))
        else:
            raise DeviceOptionError(
                f"range can only be '<number>-<number>', but found '{item}'")
    return tuple(ids)


def parse_selection(text: str) -> DeviceSelection:
    """dcgm-exporter 4.8.4's grammar: `f`, or `g[:IDS]` and/or `i[:IDS]` joined by `+`, IDS a
    comma-separated list of numbers and `A-B` ranges. Raises DeviceOptionError with its
    message."""
    parts = text.split("+")
    chosen: dict[str, tuple[int, ...] | None] = {}  # letter → ids, None: all
    for part in parts:
        if part == "":
            raise DeviceOptionError(f"invalid device option '{text}': empty selector")
        letter, has_range, spec = part.partition(":")
        if ":" in spec:
            raise DeviceOptionError(
                f"invalid ranged device option '{text}': there can only be one specified range")
        if letter == "f":
            if len(parts) > 1:
                raise DeviceOptionError(
                    "the flex option 'f' cannot be combined with other device options")
            if has_range:
                raise DeviceOptionError("no range can be specified with the flex option 'f'")
        elif letter in ("g", "i"):
            if letter in chosen:
                raise DeviceOptionError(f"duplicate device option '{letter}'")
            chosen[letter] = _ids(spec) if has_range else None
        else:
            raise DeviceOptionError(
                f"the only valid options are 'f', 'g', or 'i', but found '{letter}'")
    return DeviceSelection("g" in chosen, chosen.get("g"), "i" in chosen, chosen.get("i"))


Part = tuple[GpuSnapshot, GpuInstance | None]


def monitored(node: NodeSnapshot, selection: DeviceSelection) -> list[Part]:
    """The healthy entities that get series, in dcgm-exporter's order; an id that matches
    nothing selects nothing (dcgm-exporter refuses to start; GPUs come and go under us), and an
    id given twice selects once (dcgm-exporter would print its series twice)."""
    gpus = [gpu for gpu in node.gpus if gpu.healthy]
    if selection.flex:
        return [(gpu, inst) for gpu in gpus
                for inst in (gpu.instances if gpu.mig_enabled and gpu.instances else (None,))]
    parts: list[Part] = []
    if selection.gpus:
        by_index = {gpu.identity.index: gpu for gpu in gpus}
        order = (list(by_index) if selection.gpu_ids is None
                 else list(dict.fromkeys(selection.gpu_ids)))
        parts += [(by_index[i], None) for i in order if i in by_index]
    if selection.instances:
        every = [(gpu, inst) for gpu in gpus for inst in gpu.instances]
        if selection.instance_ids is None:
            parts += every
        else:
            by_id = {inst.entity_id: (gpu, inst) for gpu, inst in every}
            parts += [by_id[i] for i in dict.fromkeys(selection.instance_ids) if i in by_id]
    return parts


def unmatched(node: NodeSnapshot, selection: DeviceSelection) -> list[str]:
    """The ids of `selection` that name nothing in `node`, as `g:ID` and `i:ID`."""
    indices = {gpu.identity.index for gpu in node.gpus}
    entities = {inst.entity_id for gpu in node.gpus for inst in gpu.instances}
    return ([f"g:{i}" for i in selection.gpu_ids or () if i not in indices]
            + [f"i:{i}" for i in selection.instance_ids or () if i not in entities])


# dcgm-exporter's -o (internal/pkg/transformation/const.go, gpu_collector.go `toMetric`): the
# 1.x names of the GPU UUID label and the three pod attributes; nothing else is renamed.
OLD_NAMES: Final = {
    names.LABEL_UUID: "uuid",
    names.LABEL_POD: "pod_name",
    names.LABEL_NAMESPACE: "pod_namespace",
    names.LABEL_CONTAINER: "container_name",
}

# Go's unicode.IsSpace, which strings.Fields splits on (Python's str.split also splits on
# U+001C..U+001F).
_GO_SPACE: Final = re.compile("[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
                              "\u205f\u3000]+")


def dashed(model: str) -> str:
    """`-rbmn` (gpu_collector.go `getGPUModel`): the model name split on runs of whitespace and
    joined with `-`, so leading and trailing blanks go."""
    return "-".join(word for word in _GO_SPACE.split(model) if word)


@dataclass(frozen=True, slots=True)
class LabelStyle:
    """How the DCGM families spell labels: `-rbmn` and `-o`."""

    dashed_model_names: bool = False
    old_namespace: bool = False

    def pairs(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """`pairs` with `modelName` dashed and the 1.x names, as asked."""
        result = list(pairs)
        if self.dashed_model_names:
            result = [(k, dashed(v) if k == names.LABEL_MODEL_NAME else v) for k, v in result]
        if self.old_namespace:
            result = [(OLD_NAMES.get(k, k), v) for k, v in result]
        return result


PLAIN_STYLE: Final = LabelStyle()
