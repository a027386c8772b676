"""Envoy's configuration for a set of ``sonic serve`` replicas, as a plain dict (YAML on output).

The same function renders the Kubernetes ConfigMap (replicas behind a headless Service, resolved
with STRICT_DNS) and the config of ``sonic deploy local`` (replicas at fixed local addresses,
STATIC): listener, filters, retries, health checks and balancing are identical; only where the
replicas are found differs. Envoy does all the work: per-request LEAST_REQUEST balancing over
HTTP/2, retries on another replica when one resets or is unavailable, active gRPC health checks,
the admission filter (Lua, querying Prometheus) and optional JWT, TLS and connection rate limits.
"""

from __future__ import annotations

import string
from importlib import resources
from typing import Any

from sonic.deploy.envoy_settings import (
    ADMISSION_HEADER,
    INGRESS_STAT_PREFIX,
    REPLICA_CLUSTER,
    Admission,
    EnvoySettings,
    JwtAuth,
)

# When Envoy tries another replica: the request never reached one (connect-failure, refused-stream:
# an HTTP/2 REFUSED_STREAM or a GOAWAY of a draining replica) or the replica vanished before
# answering (reset: the connection closed, a SIGKILL), or it answered gRPC UNAVAILABLE (draining,
# not ready). Inference is idempotent, so a second try cannot do harm; a model's own errors
# (INVALID_ARGUMENT, INTERNAL...) and time-outs are not retried: another replica would answer the same.
RETRY_ON = "connect-failure,refused-stream,reset,unavailable"


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def _typed(type_name: str, **fields: Any) -> dict[str, Any]:
    return {"@type": f"type.googleapis.com/{type_name}", **fields}


def _endpoints(name: str, addresses: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "cluster_name": name,
        "endpoints": [
            {
                "lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}
                    for host, port in addresses
                ]
            }
        ],
    }


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"replica address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _http2_upstream() -> dict[str, Any]:
    return {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": _typed(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            explicit_http_config={"http2_protocol_options": {}},
        )
    }


def replica_cluster(settings: EnvoySettings) -> dict[str, Any]:
    upstream = settings.upstream
    cluster: dict[str, Any] = {"name": REPLICA_CLUSTER, "connect_timeout": "1s"}
    if upstream.service:
        # Every A record of the headless Service is one replica; pods leaving the Service leave Envoy
        # at the next resolution, without waiting for failed health checks.
        cluster |= {
            "type": "STRICT_DNS",
            "dns_lookup_family": "V4_PREFERRED",
            "dns_refresh_rate": _duration(settings.dns_refresh_s),
            "respect_dns_ttl": False,
            "ignore_health_on_host_removal": True,
            "load_assignment": _endpoints(REPLICA_CLUSTER, [(upstream.service, upstream.port)]),
        }
    else:
        cluster |= {
            "type": "STATIC",
            "load_assignment": _endpoints(REPLICA_CLUSTER, [_split(a) for a in upstream.addresses]),
        }
    return cluster | {
        # Per request, not per connection: each HTTP/2 stream goes to the replica with the fewest
        # requests in flight (of two picked at random).
        "lb_policy": "LEAST_REQUEST",
        "typed_extension_protocol_options": _http2_upstream(),
        "circuit_breakers": {"thresholds": [_thresholds()]},
        "health_checks": [
            {
                "timeout": "1s",
                "interval": _duration(settings.health_check_interval_s),
                "unhealthy_threshold": 2,
                "healthy_threshold": 1,
                "grpc_health_check": {},
            }
        ],
        "outlier_detection": _outlier_detection(settings),
    }


def _thresholds() -> dict[str, Any]:
    """Circuit breakers that never turn a replica's death into overflow errors (docs/deployment.md).

    Requests, connections and queues are bounded by admission control and the replicas' own
    queues, not here: Envoy's defaults (1024 requests, 3 retries in flight) would refuse a site's
    load. Retries are bounded per request (``num_retries``), not per cluster: when a replica dies,
    every request it held needs a retry at once, and those are exactly the requests no longer
    active upstream, so a retry budget (a percentage of the active ones) overflows. With two
    replicas and 16 callers a 100 % budget still failed a call; a fixed ``max_retries`` would have
    to exceed whatever one replica may hold, which the callers decide.
    """
    unlimited = 1_000_000
    return {
        "max_connections": unlimited,
        "max_pending_requests": unlimited,
        "max_requests": unlimited,
        "max_retries": unlimited,
    }


def _outlier_detection(settings: EnvoySettings) -> dict[str, Any]:
    """Eject a replica as soon as connections to it fail (docs/deployment.md, "Losing a replica").

    A dead replica answers nothing, so LEAST_REQUEST sees it with no request in flight and prefers
    it: until it leaves the balancer, most new requests try it first. Local-origin failures (connect
    refused, connection reset, timeout) are counted apart from answers; two in a row eject it at
    once, without waiting for ``interval`` or the health checks. Answers (gRPC status, HTTP 5xx) of
    a live replica say nothing about the replica (a model's INTERNAL or INVALID_ARGUMENT), so they
    eject nothing. A passing active health check puts an ejected replica back.
    """
    return {
        "split_external_local_origin_errors": True,
        "consecutive_local_origin_failure": settings.eject_after_failures,
        "enforcing_consecutive_local_origin_failure": 100,
        "enforcing_local_origin_success_rate": 0,
        "consecutive_5xx": settings.eject_after_failures,
        "enforcing_consecutive_5xx": 0,
        "consecutive_gateway_failure": settings.eject_after_failures,
        "enforcing_consecutive_gateway_failure": 100,
        "enforcing_success_rate": 0,
        "interval": "1s",
        "base_ejection_time": _duration(settings.base_ejection_s),
        "max_ejection_percent": 50,
    }


def _prometheus_cluster(admission: Admission) -> dict[str, Any]:
    return {
        "name": "prometheus",
        "connect_timeout": "1s",
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_PREFERRED",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": _endpoints("prometheus", [(admission.prometheus_host, admission.prometheus_port)]),
    }


def admission_lua(admission: Admission) -> str:
    template = resources.files("sonic.deploy").joinpath("admission.lua").read_text(encoding="utf-8")
    if "]==]" in admission.query:
        raise ValueError(f"admission query {admission.query!r} may not contain ']==]'")
    return string.Template(template).substitute(
        query=admission.query,
        threshold=repr(float(admission.threshold)),
        authority=f"{admission.prometheus_host}:{admission.prometheus_port}",
    )


def _jwt_filter(jwt: JwtAuth) -> dict[str, Any]:
    provider: dict[str, Any] = {"issuer": jwt.issuer, "forward": True}
    if jwt.audiences:
        provider["audiences"] = list(jwt.audiences)
    if jwt.jwks_file:
        provider["local_jwks"] = {"filename": jwt.jwks_file}
    else:
        provider["remote_jwks"] = {
            "http_uri": {"uri": jwt.jwks_uri, "cluster": "jwks", "timeout": "5s"},
            "cache_duration": "300s",
        }
    return {
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": _typed(
            "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            providers={"sonic": provider},
            rules=[
                # Health checks of load balancers and probes carry no token.
                {"match": {"prefix": "/grpc.health.v1.Health/"}},
                {"match": {"prefix": "/"}, "requires": {"provider_name": "sonic"}},
            ],
        ),
    }


def _jwks_cluster(jwt: JwtAuth) -> dict[str, Any]:
    return {
        "name": "jwks",
        "connect_timeout": "5s",
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_PREFERRED",
        "load_assignment": _endpoints("jwks", [(jwt.jwks_host, jwt.jwks_port)]),
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": _typed(
                "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", sni=jwt.jwks_host
            ),
        },
    }


def _http_filters(settings: EnvoySettings) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = []
    if settings.jwt is not None:
        filters.append(_jwt_filter(settings.jwt))
    if settings.admission is not None:
        filters.append(
            {
                "name": "envoy.filters.http.lua",
                "typed_config": _typed(
                    "envoy.extensions.filters.http.lua.v3.Lua",
                    default_source_code={"inline_string": admission_lua(settings.admission)},
                ),
            }
        )
    filters.append(
        {
            # Per-method gRPC counters (cluster.sonic_replicas.grpc.<service>.<method>.*) for the dashboard.
            "name": "envoy.filters.http.grpc_stats",
            "typed_config": _typed(
                "envoy.extensions.filters.http.grpc_stats.v3.FilterConfig",
                stats_for_all_methods=True,
                enable_upstream_stats=True,
            ),
        }
    )
    filters.append(
        {
            "name": "envoy.filters.http.router",
            "typed_config": _typed("envoy.extensions.filters.http.router.v3.Router"),
        }
    )
    return filters


def _header(key: str, value: str) -> dict[str, Any]:
    return {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def _routes(settings: EnvoySettings) -> list[dict[str, Any]]:
    forward = {
        "match": {"prefix": "/"},
        "route": {
            "cluster": REPLICA_CLUSTER,
            "timeout": _duration(settings.route_timeout_s),
            "retry_policy": {
                # A replica that dies or drains: the request goes to another one. Requests larger than
                # the retry buffer (1 MiB) are not retried here; sonic.client retries those.
                "retry_on": RETRY_ON,
                "num_retries": settings.retries,
                "retry_host_predicate": [
                    {
                        "name": "envoy.retry_host_predicates.previous_hosts",
                        "typed_config": _typed(
                            "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
                        ),
                    }
                ],
                # Each try picks a replica no try of this request used (previous_hosts), drawing
                # again up to this many times: with 2 replicas and LEAST_REQUEST preferring the dead
                # one, 5 draws still land on it 0.75**5 = 24 % of the time; 20 draws, 0.3 %.
                "host_selection_retry_max_attempts": 20,
                # Envoy's defaults, spelled out: the first retry within 25 ms (jittered), then doubling.
                "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.25s"},
            },
        },
    }
    if settings.admission is None:
        return [forward]
    refuse = {
        "match": {
            "prefix": "/",
            "headers": [{"name": ADMISSION_HEADER, "string_match": {"exact": "refused"}}],
        },
        # A trailers-only gRPC answer: UNAVAILABLE, which clients treat as "retry later".
        "direct_response": {"status": 200},
        "response_headers_to_add": [
            _header("content-type", "application/grpc"),
            _header("grpc-status", "14"),
            _header("grpc-message", "%REQ(x-sonic-admission-reason)%"),
        ],
    }
    return [refuse, forward]


def _listener(settings: EnvoySettings) -> dict[str, Any]:
    manager = _typed(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix=INGRESS_STAT_PREFIX,
        codec_type="AUTO",
        http2_protocol_options={},
        route_config={
            "name": "sonic",
            "virtual_hosts": [{"name": "sonic", "domains": ["*"], "routes": _routes(settings)}],
        },
        http_filters=_http_filters(settings),
    )
    chain: dict[str, Any] = {
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]
    }
    if settings.tls is not None:
        chain["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": _typed(
                "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                common_tls_context={
                    "alpn_protocols": ["h2"],
                    "tls_certificates": [
                        {
                            "certificate_chain": {"filename": settings.tls.cert_file},
                            "private_key": {"filename": settings.tls.key_file},
                        }
                    ],
                },
            ),
        }
    listener: dict[str, Any] = {
        "name": "sonic_grpc",
        "address": {
            "socket_address": {"address": settings.listen_address, "port_value": settings.listen_port}
        },
        "filter_chains": [chain],
    }
    if settings.rate_limit is not None:
        limit = settings.rate_limit
        listener["listener_filters"] = [
            {
                "name": "envoy.filters.listener.local_ratelimit",
                "typed_config": _typed(
                    "envoy.extensions.filters.listener.local_ratelimit.v3.LocalRateLimit",
                    stat_prefix="sonic_connections",
                    token_bucket={
                        "max_tokens": limit.max_tokens,
                        "tokens_per_fill": limit.tokens_per_fill,
                        "fill_interval": _duration(limit.fill_interval_s),
                    },
                ),
            }
        ]
    return listener


def envoy_config(settings: EnvoySettings) -> dict[str, Any]:
    clusters = [replica_cluster(settings)]
    if settings.admission is not None:
        clusters.append(_prometheus_cluster(settings.admission))
    if settings.jwt is not None and settings.jwt.jwks_uri:
        clusters.append(_jwks_cluster(settings.jwt))
    return {
        "admin": {
            "address": {
                "socket_address": {"address": settings.admin_address, "port_value": settings.admin_port}
            }
        },
        "static_resources": {"listeners": [_listener(settings)], "clusters": clusters},
    }
