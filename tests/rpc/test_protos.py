"""The pod-resources protos: committed stubs are fresh, and names and numbers match the kubelet's.

A wrong field number or package name would not fail any local round trip (client and fake
kubelet share the stubs) but a real kubelet would answer garbage or UNIMPLEMENTED; the table
below is the kubelet's published API, checked against the descriptors.
"""

import dataclasses
import importlib.metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from gpu_enricher.rpc._generated.podresources.v1 import api_pb2 as v1_pb2
from gpu_enricher.rpc._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
COMMITTED = ROOT / "src" / "gpu_enricher" / "rpc" / "_generated"
REGENERATE = "the committed stubs are stale: run `tox -e protos` and commit the result"

_I64 = FieldDescriptor.TYPE_INT64
_U64 = FieldDescriptor.TYPE_UINT64
_STR = FieldDescriptor.TYPE_STRING
_MSG = FieldDescriptor.TYPE_MESSAGE
_R = True  # repeated

# message full name -> {field name: (number, type, repeated, message type full name or "")}
V1_FIELDS: dict[str, dict[str, tuple[int, int, bool, str]]] = {
    "v1.ListPodResourcesRequest": {},
    "v1.ListPodResourcesResponse": {"pod_resources": (1, _MSG, _R, "v1.PodResources")},
    "v1.PodResources": {
        "name": (1, _STR, False, ""),
        "namespace": (2, _STR, False, ""),
        "containers": (3, _MSG, _R, "v1.ContainerResources"),
        "cpu_ids": (4, _I64, _R, ""),
        "memory": (5, _MSG, _R, "v1.ContainerMemory"),
    },
    "v1.ContainerResources": {
        "name": (1, _STR, False, ""),
        "devices": (2, _MSG, _R, "v1.ContainerDevices"),
        "cpu_ids": (3, _I64, _R, ""),
        "memory": (4, _MSG, _R, "v1.ContainerMemory"),
        "dynamic_resources": (5, _MSG, _R, "v1.DynamicResource"),
    },
    "v1.ContainerDevices": {
        "resource_name": (1, _STR, False, ""),
        "device_ids": (2, _STR, _R, ""),
        "topology": (3, _MSG, False, "v1.TopologyInfo"),
    },
    "v1.TopologyInfo": {"nodes": (1, _MSG, _R, "v1.NUMANode")},
    "v1.NUMANode": {"ID": (1, _I64, False, "")},
    "v1.ContainerMemory": {
        "memory_type": (1, _STR, False, ""),
        "size": (2, _U64, False, ""),
        "topology": (3, _MSG, False, "v1.TopologyInfo"),
    },
    "v1.AllocatableResourcesRequest": {},
    "v1.AllocatableResourcesResponse": {
        "devices": (1, _MSG, _R, "v1.ContainerDevices"),
        "cpu_ids": (2, _I64, _R, ""),
        "memory": (3, _MSG, _R, "v1.ContainerMemory"),
    },
    "v1.DynamicResource": {
        "claim_name": (2, _STR, False, ""),
        "claim_namespace": (3, _STR, False, ""),
        "claim_resources": (4, _MSG, _R, "v1.ClaimResource"),
    },
    "v1.ClaimResource": {
        "cdi_devices": (1, _MSG, _R, "v1.CDIDevice"),
        "driver_name": (2, _STR, False, ""),
        "pool_name": (3, _STR, False, ""),
        "device_name": (4, _STR, False, ""),
        "share_id": (5, _STR, False, ""),
    },
    "v1.CDIDevice": {"name": (1, _STR, False, "")},
    "v1.GetPodResourcesRequest": {
        "pod_name": (1, _STR, False, ""),
        "pod_namespace": (2, _STR, False, ""),
    },
    "v1.GetPodResourcesResponse": {"pod_resources": (1, _MSG, False, "v1.PodResources")},
}

V1ALPHA1_FIELDS: dict[str, dict[str, tuple[int, int, bool, str]]] = {
    "v1alpha1.ListPodResourcesRequest": {},
    "v1alpha1.ListPodResourcesResponse": {"pod_resources": (1, _MSG, _R, "v1alpha1.PodResources")},
    "v1alpha1.PodResources": {
        "name": (1, _STR, False, ""),
        "namespace": (2, _STR, False, ""),
        "containers": (3, _MSG, _R, "v1alpha1.ContainerResources"),
    },
    "v1alpha1.ContainerResources": {
        "name": (1, _STR, False, ""),
        "devices": (2, _MSG, _R, "v1alpha1.ContainerDevices"),
    },
    "v1alpha1.ContainerDevices": {
        "resource_name": (1, _STR, False, ""),
        "device_ids": (2, _STR, _R, ""),
    },
}


def _tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    from gpu_enricher.rpc.protogen import generate

    fresh_dir = tmp_path / "_generated"
    generate(fresh_dir, proto_root=PROTOS)
    fresh, committed = _tree(fresh_dir), _tree(COMMITTED)
    # The output embeds the generator's version: a different grpcio-tools differs too.
    tools = f"(generated here with grpcio-tools {importlib.metadata.version('grpcio-tools')})"
    assert sorted(fresh) == sorted(committed), f"{REGENERATE} {tools}"
    for name, content in fresh.items():
        assert content == committed[name], f"{name}: {REGENERATE} {tools}"


def test_generated_imports_are_relative() -> None:
    for path in COMMITTED.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for package in ("podresources", "containerd"):
            assert f"from {package}" not in text and f"import {package}" not in text, path


def _messages(pb2_file: ModuleType) -> dict[str, Descriptor]:
    descriptor = pb2_file.DESCRIPTOR
    return {m.full_name: m for m in descriptor.message_types_by_name.values()}


@pytest.mark.parametrize(
    ("module", "table", "proto_file"),
    [
        (v1_pb2, V1_FIELDS, "podresources/v1/api.proto"),
        (v1alpha1_pb2, V1ALPHA1_FIELDS, "podresources/v1alpha1/api.proto"),
    ],
    ids=["v1", "v1alpha1"],
)
def test_messages_match_the_kubelet_api(
    module: ModuleType, table: dict[str, dict[str, tuple[int, int, bool, str]]], proto_file: str
) -> None:
    messages = _messages(module)
    assert messages[next(iter(table))].file.name == proto_file
    file = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    assert (file.syntax, file.package) == ("proto3", proto_file.split("/")[1])
    assert not file.options.HasField("go_package")
    assert sorted(messages) == sorted(table)
    for full_name, fields in table.items():
        message = messages[full_name]
        seen = {
            f.name: (
                f.number,
                f.type,
                f.is_repeated,
                f.message_type.full_name if f.message_type is not None else "",
            )
            for f in message.fields
        }
        assert seen == fields, full_name


def test_spot_checks() -> None:
    fields = v1_pb2.PodResources.DESCRIPTOR.fields_by_name
    assert fields["containers"].number == 3
    assert v1_pb2.NUMANode.DESCRIPTOR.fields_by_name["ID"].number == 1
    assert v1_pb2.NUMANode.DESCRIPTOR.full_name == "v1.NUMANode"


def test_dynamic_resource_reserves_retired_field_1() -> None:
    proto = descriptor_pb2.DescriptorProto()
    v1_pb2.DynamicResource.DESCRIPTOR.CopyToProto(proto)
    assert [(r.start, r.end) for r in proto.reserved_range] == [(1, 2)]  # end is exclusive
    assert list(proto.reserved_name) == ["class_name"]


def test_share_id_is_explicitly_optional() -> None:
    field = v1_pb2.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert field.has_presence
    assert field.containing_oneof is not None and field.containing_oneof.name == "_share_id"
    claim = v1_pb2.ClaimResource()
    assert not claim.HasField("share_id")
    claim.share_id = ""
    assert claim.HasField("share_id")


def test_parse_claims_keeps_share_id_presence() -> None:
    from gpu_enricher.kubelet.answers import parse_claims
    from gpu_enricher.model import ClaimAllocation

    def resource(device: str, **shared: str) -> v1_pb2.ClaimResource:
        return v1_pb2.ClaimResource(driver_name="gpu.nvidia.com", pool_name="node-a",
                                    device_name=device, **shared)

    pod = v1_pb2.PodResources(name="p", namespace="ns", containers=[
        v1_pb2.ContainerResources(name="c", dynamic_resources=[v1_pb2.DynamicResource(
            claim_name="gpus", claim_namespace="ns",
            claim_resources=[resource("gpu-0"), resource("gpu-1", share_id=""),
                             resource("gpu-2", share_id="s1")])]),
        v1_pb2.ContainerResources(name="idle"),  # no devices, no claims: nothing
    ])
    # The bytes a real kubelet sends, not the object we built.
    parsed = v1_pb2.PodResources.FromString(pod.SerializeToString())
    claim = ClaimAllocation("ns", "p", "c", "gpus", "ns", "gpu.nvidia.com", "node-a", "")
    assert parse_claims([parsed]) == (
        dataclasses.replace(claim, device="gpu-0"),
        dataclasses.replace(claim, device="gpu-1", share_id=""),
        dataclasses.replace(claim, device="gpu-2", share_id="s1"),
    )


@pytest.mark.parametrize(
    ("module", "service", "methods"),
    [
        (
            v1_pb2,
            "v1.PodResourcesLister",
            {
                "List": ("v1.ListPodResourcesRequest", "v1.ListPodResourcesResponse"),
                "GetAllocatableResources": (
                    "v1.AllocatableResourcesRequest",
                    "v1.AllocatableResourcesResponse",
                ),
                "Get": ("v1.GetPodResourcesRequest", "v1.GetPodResourcesResponse"),
            },
        ),
        (
            v1alpha1_pb2,
            "v1alpha1.PodResourcesLister",
            {"List": ("v1alpha1.ListPodResourcesRequest", "v1alpha1.ListPodResourcesResponse")},
        ),
    ],
    ids=["v1", "v1alpha1"],
)
def test_services_match_the_kubelet_api(
    module: ModuleType, service: str, methods: dict[str, tuple[str, str]]
) -> None:
    file = module.DESCRIPTOR
    assert [s.full_name for s in file.services_by_name.values()] == [service]
    svc = file.services_by_name[service.split(".")[1]]
    seen = {
        m.name: (m.input_type.full_name, m.output_type.full_name)
        for m in svc.methods
        if not m.client_streaming and not m.server_streaming
    }
    assert seen == methods
    assert len(svc.methods) == len(methods)  # all unary


class _RecordingChannel:
    """Stands in for a grpc channel: records the method paths a generated stub registers."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def unary_unary(self, path: str, *args: Any, **kwargs: Any) -> object:
        self.paths.append(path)
        return object()


def test_method_paths_of_the_generated_client_stubs() -> None:
    # These paths are what the kubelet routes on; the stubs derive them from package.service.
    from gpu_enricher.rpc._generated.podresources.v1 import api_pb2_grpc as v1_grpc
    from gpu_enricher.rpc._generated.podresources.v1alpha1 import api_pb2_grpc as a_grpc

    v1_channel, alpha_channel = _RecordingChannel(), _RecordingChannel()
    v1_grpc.PodResourcesListerStub(v1_channel)
    a_grpc.PodResourcesListerStub(alpha_channel)
    assert sorted(v1_channel.paths) == [
        "/v1.PodResourcesLister/Get",
        "/v1.PodResourcesLister/GetAllocatableResources",
        "/v1.PodResourcesLister/List",
    ]
    assert alpha_channel.paths == ["/v1alpha1.PodResourcesLister/List"]
