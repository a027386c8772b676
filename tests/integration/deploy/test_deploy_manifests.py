"""deploy/kubernetes: generated files current, overlays render offline and validate, Envoy accepts its config."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sonic.deploy import grafana
from sonic.deploy.binaries import envoy_binary
from sonic.deploy.envoy import admission_lua, envoy_config
from sonic.deploy.envoy_settings import Admission, EnvoySettings, JwtAuth, Upstream
from sonic.deploy.keda import Scaling, desired_replicas
from sonic.deploy.kubernetes import generated_files
from sonic.deploy.metrics import ScrapeTargets, local_prometheus_config, recording_rules
from sonic.deploy.yamltext import to_yaml

from .conftest import REPO_ROOT, self_signed

pytestmark = pytest.mark.integration
KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu", "example-site")
KUBERNETES_VERSION = "1.32.0"  # preStop `sleep` needs 1.30
SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = {
    "ScaledObject": "keda-scaledobject.json",
    "ServiceMonitor": "servicemonitor.json",
    "PrometheusRule": "prometheusrule.json",
}


def render(overlay: str) -> list[dict[str, object]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (its built-in kustomize renders offline)")
    text = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_generated_files_are_current() -> None:
    stale = [p for p, text in generated_files().items() if (KUBERNETES / p).read_text() != text]
    assert not stale, f"run `sonic deploy render` and commit: {stale} differ from sonic.deploy's output"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay: str) -> None:
    kinds = []
    for doc in render(overlay):
        kind = str(doc["kind"])
        kinds.append(kind)
        if kind in CRD_SCHEMAS:
            schema = json.loads((SCHEMAS / CRD_SCHEMAS[kind]).read_text())
            jsonschema.validate(doc, schema)
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ScaledObject"} <= set(kinds)


def test_validation_catches_mistakes() -> None:
    """The validators used above do reject a wrong object (so the test above can fail)."""
    deployment = next(d for d in render("cpu") if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60  # type: ignore[index]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    scaled = next(d for d in render("cpu") if d["kind"] == "ScaledObject")
    scaled["spec"]["triggers"][0]["metricType"] = "Average"  # type: ignore[index]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, json.loads((SCHEMAS / CRD_SCHEMAS["ScaledObject"]).read_text()))


def test_replica_deployment_drains_before_it_is_killed() -> None:
    sonic = next(d for d in render("gpu") if d["kind"] == "Deployment" and d["metadata"]["name"] == "sonic")  # type: ignore[index]
    pod = sonic["spec"]["template"]["spec"]  # type: ignore[index]
    container = pod["containers"][0]
    exit_timeout = float(
        next(a for a in container["args"] if a.startswith("--exit-timeout-secs=")).split("=")[1]
    )
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + exit_timeout
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {c["name"] for c in pod["initContainers"]} == {"fetch-models"}


def envoy_validate(config_text: str, tmp_path: Path) -> None:
    path = tmp_path / "envoy.yaml"
    path.write_text(config_text)
    result = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "--config-path", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", ["base/generated/envoy.yaml", "overlays/example-site/generated/envoy.yaml"])
def test_envoy_accepts_the_kubernetes_config(path: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)  # the site's TLS secret, mounted at /etc/envoy-tls in the pod
    text = (KUBERNETES / path).read_text().replace("/etc/envoy-tls/tls.crt", str(cert))
    envoy_validate(text.replace("/etc/envoy-tls/tls.key", str(key)), tmp_path)


def test_envoy_rejects_a_broken_config(tmp_path: Path) -> None:
    config = envoy_config(EnvoySettings(upstream=Upstream(addresses=("127.0.0.1:1",))))
    config["static_resources"]["clusters"][0]["lb_policy"] = "LEAST_BUSY"
    with pytest.raises(AssertionError, match="LEAST_BUSY"):
        envoy_validate(to_yaml(config), tmp_path)


def test_local_and_kubernetes_envoy_differ_only_in_replica_discovery() -> None:
    admission = Admission("prometheus", 9090, "vector(1)", 3.0)
    local = envoy_config(
        EnvoySettings(upstream=Upstream(addresses=("127.0.0.1:7001", "127.0.0.1:7002")), admission=admission)
    )
    remote = envoy_config(EnvoySettings(upstream=Upstream(service="sonic-replicas"), admission=admission))
    assert local["static_resources"]["listeners"] == remote["static_resources"]["listeners"]
    local_cluster, remote_cluster = (c["static_resources"]["clusters"][0] for c in (local, remote))
    discovery = {"type", "load_assignment", "dns_lookup_family", "dns_refresh_rate", "respect_dns_ttl"}
    discovery.add("ignore_health_on_host_removal")
    assert {k: v for k, v in local_cluster.items() if k not in discovery} == {
        k: v for k, v in remote_cluster.items() if k not in discovery
    }
    assert (local_cluster["type"], remote_cluster["type"]) == ("STATIC", "STRICT_DNS")


def test_bad_settings_are_refused_with_reasons() -> None:
    with pytest.raises(ValueError, match="either a service name or replica addresses"):
        Upstream()
    with pytest.raises(ValueError, match="needs jwks_host"):
        JwtAuth(issuer="https://x", jwks_uri="https://x/jwks")
    with pytest.raises(ValueError, match="HOST:PORT"):
        envoy_config(EnvoySettings(upstream=Upstream(addresses=("no-port",))))
    with pytest.raises(ValueError, match="may not contain"):
        admission_lua(Admission("p", 1, "x]==]", 1.0))
    with pytest.raises(ValueError, match="min 3 <= max 2"):
        Scaling(min_replicas=3, max_replicas=2)


def test_desired_replicas_follows_the_hpa_value_formula() -> None:
    scaling = Scaling(threshold_ms=5.0, min_replicas=1, max_replicas=10)
    assert desired_replicas(2, 20.0, scaling) == 8  # ceil(2 * 20 / 5)
    assert desired_replicas(2, 5.4, scaling) == 2  # within the 10 % tolerance
    assert desired_replicas(4, 1.0, scaling) == 1  # ceil(4 * 0.2)
    assert desired_replicas(3, 1000.0, scaling) == 10
    assert desired_replicas(3, math.nan, scaling) == 1
    assert desired_replicas(3, None, scaling) == 1


def _promtool() -> Path:
    path = REPO_ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
    if not path.is_file():
        pytest.skip(f"no promtool at {path}: run tools/install-prometheus.sh (./dev test does)")
    return path


def test_prometheus_configs_and_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = tmp_path / "rules.yml"
    rules.write_text(to_yaml(recording_rules("4s")))
    local = tmp_path / "local.yml"
    local.write_text(
        to_yaml(local_prometheus_config(ScrapeTargets(["127.0.0.1:1"], "127.0.0.1:2"), str(rules), "1s"))
    )
    # The Kubernetes config (kubernetes_sd_configs) is not checked here: Debian builds Prometheus
    # without Kubernetes service discovery; the upstream image in the manifests has it.
    for args in (
        ["check", "rules", str(KUBERNETES / "base/generated/rules.yml")],
        ["check", "config", str(local)],
    ):
        result = subprocess.run([str(promtool), *args], check=False, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_panels_all_have_queries() -> None:
    board = json.loads((KUBERNETES / "base/generated/dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert exprs == grafana.expressions()
    assert len(board["panels"]) >= 8
