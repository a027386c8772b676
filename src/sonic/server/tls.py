"""TLS material for the frontends: one certificate/key pair, optionally a CA that client certificates
must chain to (mutual TLS). Files are read once at start-up."""

from __future__ import annotations

import ssl

import grpc

from sonic.server.config import TlsConfig


def http_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_path, tls.key_path)
    if tls.client_ca_path is not None:
        context.load_verify_locations(cafile=tls.client_ca_path)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def grpc_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """For the native gRPC frontend: HTTP/2 must be negotiated with ALPN."""
    context = http_ssl_context(tls)
    context.set_alpn_protocols(["h2"])
    return context


def grpc_server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    key = tls.key_path.read_bytes()
    cert = tls.cert_path.read_bytes()
    root = tls.client_ca_path.read_bytes() if tls.client_ca_path is not None else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=tls.client_ca_path is not None
    )
