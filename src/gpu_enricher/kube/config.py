"""Where the API server is and how to authenticate to it, decided afresh on every connect.

In order: an explicit `host` URL (no authentication: the simulated node and tests), an explicit
kubeconfig file, the pod's service account (in a cluster), then `$KUBECONFIG`, then
`~/.kube/config`. An explicit kubeconfig beats the service account, as in kubectl: whoever
passed one meant it. Deciding on every connect lets a token or file that appears later be used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from .. import __version__
from .client import NO_CONFIG, KubeError

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT: Final = f"gpu-enricher/{__version__}"

ConfigKind = Literal["host", "kubeconfig", "in-cluster"]


@dataclass(frozen=True, slots=True)
class ConfigPlan:
    kind: ConfigKind
    location: str
    """The host URL, the kubeconfig path(s) (`$KUBECONFIG` may list several), or the
    service-account directory."""


def plan_config(
    host: str | None,
    kubeconfig: str | None,
    environ: Mapping[str, str],
    home: Path,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ConfigPlan:
    """The configuration to load; KubeError(`no_config`) saying what was looked for."""
    if host:
        return ConfigPlan("host", host)
    if kubeconfig:
        return ConfigPlan("kubeconfig", kubeconfig)
    in_cluster_env = bool(environ.get("KUBERNETES_SERVICE_HOST")
                          and environ.get("KUBERNETES_SERVICE_PORT"))
    if in_cluster_env and (service_account_dir / "token").is_file():
        return ConfigPlan("in-cluster", str(service_account_dir))
    if environ.get("KUBECONFIG"):
        return ConfigPlan("kubeconfig", environ["KUBECONFIG"])
    default = home / ".kube" / "config"
    if default.is_file():
        return ConfigPlan("kubeconfig", str(default))
    cluster = (f"KUBERNETES_SERVICE_HOST is set but {service_account_dir}/token is missing "
               "(automountServiceAccountToken off?)" if in_cluster_env
               else "not in a cluster (KUBERNETES_SERVICE_HOST unset)")
    raise KubeError(NO_CONFIG, f"no Kubernetes API configuration: {cluster}, no --kubeconfig, "
                               f"$KUBECONFIG unset and no {default}")


def plan_from_environment(host: str | None, kubeconfig: str | None) -> ConfigPlan:
    return plan_config(host, kubeconfig, os.environ, Path.home())


async def open_api_client(plan: ConfigPlan) -> ApiClient:
    """A new ApiClient for `plan` (the caller closes it); KubeError(`no_config`) if the
    configuration cannot be loaded. Imports kubernetes_asyncio: call only with the feature on."""
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration
    from kubernetes_asyncio.config.config_exception import ConfigException
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
    from kubernetes_asyncio.config.kube_config import load_kube_config
    from yaml import YAMLError

    configuration = Configuration()
    try:
        if plan.kind == "host":
            configuration.host = plan.location.rstrip("/")
        elif plan.kind == "in-cluster":
            directory = Path(plan.location)
            # The loader re-reads the token file every minute: bound tokens rotate.
            InClusterConfigLoader(token_filename=str(directory / "token"),
                                  cert_filename=str(directory / "ca.crt"),
                                  ).load_and_set(configuration)
        else:
            # persist_config=False: never write refreshed credentials back to a user's file.
            await load_kube_config(config_file=plan.location, client_configuration=configuration,
                                   persist_config=False)
    except (ConfigException, YAMLError, OSError, ValueError, KeyError, TypeError) as exc:
        # The loaders check little: a kubeconfig with a wrong shape fails as a KeyError or
        # TypeError deep inside them, and that is a configuration problem like any other.
        raise KubeError(NO_CONFIG, f"cannot load {plan.kind} configuration from "
                                   f"{plan.location}: {exc}") from exc
    api = ApiClient(configuration)
    api.user_agent = USER_AGENT
    return api


def remove_credential_copies() -> None:
    """kubernetes_asyncio copies a kubeconfig's inline certificates and private key into
    temporary files and removes them from an atexit hook, which never runs: the process ends
    with os._exit (app.end_process), which calls this. Nothing to do if it was never loaded."""
    kube_config = sys.modules.get("kubernetes_asyncio.config.kube_config")
    if kube_config is not None:
        kube_config._cleanup_temp_files()
