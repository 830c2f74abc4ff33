"""`gpu-enricher inspect`: the query API as tables, `nvidia-smi` with pod columns.

Fetches `/api/v1/gpus` from a running exporter (default http://localhost:9400) and prints its
GPUs and MIG instances with their UUIDs and holders (on a host without Kubernetes, the
containers and people using them), every GPU process with its pod (or container, or user), then
each holder's GPU time and energy since the exporter started. A
GPU's UUID is the `UUID` label of its series, and of its MIG instances' series (which add
`GPU_I_ID`, the GI column); a MIG instance's own `MIG-…` UUID is what the kubelet's device IDs
and NVIDIA_VISIBLE_DEVICES name. The formatting is pure (`tables`); only `fetch` does I/O.
"""

import argparse
import contextlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, Final

from ..fields.convert import MIB

DEFAULT_URL: Final = "http://localhost:9400"


class InspectError(Exception):
    pass


def api_url(base: str, namespace: str | None, pod: str | None) -> str:
    base = base if "://" in base else f"http://{base}"
    url = base.rstrip("/")
    if not url.endswith("/api/v1/gpus"):
        url += "/api/v1/gpus"
    params = {k: v for k, v in (("namespace", namespace), ("pod", pod)) if v}
    return url + ("?" + urllib.parse.urlencode(params) if params else "")


def _opener(url: str) -> urllib.request.OpenerDirector:
    """No proxy for the exporter on this host (`kubectl exec … inspect` in a pod whose
    environment sets HTTP_PROXY); the environment's proxies elsewhere."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", "127.0.0.1", "::1"):
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def fetch(url: str, timeout: float = 5.0) -> dict[str, Any]:
    try:
        with _opener(url).open(url, timeout=timeout) as response:
            document = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        with contextlib.suppress(ValueError, AttributeError):  # not our JSON: the raw text
            detail = json.loads(detail).get("error", detail)
        raise InspectError(f"{url} answered {exc.code}: {detail or exc.reason}") from None
    except urllib.error.URLError as exc:
        raise InspectError(f"cannot reach {url}: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise InspectError(f"cannot read {url}: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        raise InspectError(f"{url} did not answer with gpu-enricher's /api/v1/gpus document")
    return document


def _mib(value: Any) -> str:
    return "-" if value is None else str(int(value) // MIB)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{round(100 * float(value))}%"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)]


def _holders(device: dict[str, Any]) -> str:
    """Its pods, else (a host without Kubernetes) its containers and the people using it."""
    names = sorted({f"{h['namespace']}/{h['pod']}" for h in device.get("holders", [])})
    names = names or [*(f"container {c}" for c in device.get("containers", [])),
                      *(f"user {u}" for u in device.get("users", []))]
    return ", ".join(names) or "-"


def _amount(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f}"


def _billing(gpu: dict[str, Any], gi: str, device: dict[str, Any]) -> list[list[str]]:
    """One row per holder: its GPU time (the container's devices of that resource) and its
    energy on this device, since the exporter started; and per container or person using it
    outside pods (a host without Kubernetes), theirs."""
    rows = [[str(gpu["index"]), gi, h["namespace"], h["pod"], h["container"], h["resource"],
             _amount(h.get("gpu_seconds")), _amount(h.get("energy_joules"))]
            for h in device.get("holders", [])]
    for account in device.get("accounts", []):
        who = account["container"] if "container" in account else f"user {account['user']}"
        rows.append([str(gpu["index"]), gi, "-", "-", who, "-",
                     _amount(account.get("gpu_seconds")), _amount(account.get("energy_joules"))])
    return rows


def tables(document: dict[str, Any]) -> str:
    devices: list[list[str]] = []
    processes: list[list[str]] = []
    billing: list[list[str]] = []
    for gpu in document["gpus"]:
        parts = [(gpu, "-")] + [(i, str(i["gpu_instance_id"])) for i in gpu["mig_instances"]]
        for device, gi in parts:
            billing += _billing(gpu, gi, device)
            is_gpu = device is gpu
            memory = f"{_mib(device.get('memory_used_bytes'))} / " \
                     f"{_mib(device.get('memory_total_bytes'))}"
            state = "" if gpu.get("healthy", True) else " (lost)"
            devices.append([str(gpu["index"]), gi,
                            (gpu["model"] if is_gpu else device["profile"]) + state,
                            device.get("uuid") or "-", memory,
                            _pct(gpu.get("utilization_ratio")) if is_gpu else "-",
                            _holders(device)])
            for proc in device["processes"]:
                allocated = {True: "yes", False: "NO", None: "-"}[proc.get("allocated")]
                processes.append([str(gpu["index"]), gi, str(proc["pid"]), proc["name"] or "?",
                                  proc.get("type") or "-", _mib(proc.get("memory_used_bytes")),
                                  _pct(proc.get("sm_utilization_ratio")),
                                  proc.get("namespace") or "-", proc.get("pod") or "-",
                                  proc.get("container") or "-", allocated,
                                  proc.get("user") or "-"])
    lines = _grid(["GPU", "GI", "MODEL/PROFILE", "UUID", "MEMORY MiB", "UTIL", "HELD BY"],
                  devices)
    lines.append("")
    if processes:
        header = ["GPU", "GI", "PID", "PROCESS", "TYPE", "MiB", "SM", "NAMESPACE", "POD",
                  "CONTAINER", "ALLOCATED", "USER"]
        if all(row[-1] == "-" for row in processes):  # no one's process outside a container
            header, processes = header[:-1], [row[:-1] for row in processes]
        lines += _grid(header, processes)
    elif not document.get("process_metrics"):
        lines.append("No processes: start the exporter with --process-metrics.")
    else:
        lines.append("No GPU processes.")
    if any(row[-2:] != ["-", "-"] for row in billing):  # an exporter that keeps accounts
        lines.append("")
        lines += _grid(["GPU", "GI", "NAMESPACE", "POD", "CONTAINER", "RESOURCE",
                        "GPU-SECONDS", "JOULES"], billing)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-enricher inspect",
        description="Who holds and who uses each GPU, from a running exporter's /api/v1/gpus.")
    parser.add_argument("--url", default=DEFAULT_URL,
                        help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument("--namespace", help="only the GPUs of pods in this namespace")
    parser.add_argument("--pod", help="only the GPUs of this pod")
    args = parser.parse_args(argv)
    url = api_url(args.url, args.namespace, args.pod)
    try:
        document = fetch(url)
    except InspectError as exc:
        print(f"gpu-enricher inspect: {exc}", file=sys.stderr)
        return 1
    try:
        text = tables(document)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        print(f"gpu-enricher inspect: {url} answered a document this version cannot read "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0
