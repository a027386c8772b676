"""Who may call what: bearer tokens, per-client request rate, and admission control.

Transport-neutral, like the data plane: the gRPC and HTTP adapters describe each call (its kind, the
``authorization`` header, the connection it came on) and :meth:`Guard.check` raises the
:mod:`sonic.protocol.errors` error that refuses it. Nothing here runs unless configured, so a plain server
pays nothing on its hot path.
"""

from __future__ import annotations

import enum
import hmac
import json
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from sonic.protocol.errors import ResourceExhaustedError, UnauthenticatedError, UnavailableError
from sonic.server.config import AdmissionConfig, AuthConfig, SecurityConfig
from sonic.server.models.manager import ModelManager

# Bounds on per-client tables, so a scan of many source ports cannot grow memory without limit.
MAX_TRACKED_CLIENTS = 65_536
MAX_CACHED_JWTS = 4_096


class CallKind(enum.Enum):
    HEALTH = "health"  # live / ready / model ready: what load balancers probe
    INDEX = "index"  # RepositoryIndex: how SONIC clients announce themselves (SuperSONIC's hook)
    CONTROL = "control"  # metadata, config, statistics, load / unload
    INFER = "infer"


class TokenVerifier:
    """Checks ``Authorization: Bearer <token>`` against static tokens and a local JWT key set."""

    def __init__(self, auth: AuthConfig, clock: Callable[[], float] = time.time) -> None:
        self._tokens = tuple(t.encode() for t in auth.tokens)
        self._auth = auth
        self._clock = clock
        self._jwks: Any = None
        self._jwt_cache: OrderedDict[str, float] = OrderedDict()  # token -> expiry (epoch s)
        if auth.jwks_path is not None:
            try:
                import jwt  # noqa: PLC0415  (optional extra)
            except ImportError:
                msg = "JWT authentication needs PyJWT: pip install 'sonic-inference[jwt]'"
                raise ImportError(msg) from None
            self._jwt = jwt
            try:
                self._jwks = jwt.PyJWKSet.from_dict(json.loads(auth.jwks_path.read_text(encoding="utf-8")))
            except (ValueError, jwt.PyJWTError) as exc:  # JSONDecodeError is a ValueError
                raise ValueError(f"{auth.jwks_path}: not a usable JSON Web Key Set: {exc}") from None

    def verify(self, authorization: str | None) -> None:
        if not authorization:
            msg = "authentication required: send 'authorization: Bearer <token>'"
            raise UnauthenticatedError(msg)
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            msg = "authentication required: the authorization header must be 'Bearer <token>'"
            raise UnauthenticatedError(msg)
        # aiohttp hands header bytes that are not UTF-8 over as lone surrogates: they must encode (and then
        # match no configured token), not raise.
        encoded = token.strip().encode("utf-8", errors="surrogatepass")
        # Compare against every token so the time taken does not tell which one nearly matched.
        matched = False
        for candidate in self._tokens:
            matched |= hmac.compare_digest(candidate, encoded)
        if matched:
            return
        if self._jwks is not None and self._verify_jwt(token.strip()):
            return
        msg = "authentication failed: the bearer token is not valid"
        raise UnauthenticatedError(msg)

    def _verify_jwt(self, token: str) -> bool:
        if not token.isascii():
            return False  # a JWT is base64url and dots; PyJWT would raise UnicodeEncodeError on some others
        now = self._clock()
        expiry = self._jwt_cache.get(token)
        if expiry is not None:
            if expiry > now:
                return True
            del self._jwt_cache[token]
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
            key = self._jwks[header["kid"]] if "kid" in header else self._jwks.keys[0]
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[key.algorithm_name] if key.algorithm_name else ["RS256", "ES256", "EdDSA"],
                audience=self._auth.jwt_audience,
                issuer=self._auth.jwt_issuer,
                # Expiry is checked below against our clock, the same one the cache uses.
                options={"require": ["exp"], "verify_exp": False},
            )
        except (jwt.PyJWTError, KeyError, IndexError):
            return False
        if not isinstance(claims["exp"], int | float) or claims["exp"] <= now:
            return False
        # Verified signatures are cached until the token expires: RSA checks cost ~50 us per call.
        self._jwt_cache[token] = float(claims["exp"])
        if len(self._jwt_cache) > MAX_CACHED_JWTS:
            self._jwt_cache.popitem(last=False)
        return True


class RateLimiter:
    """A token bucket per client address."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_s
        self._burst = float(max(1, burst))
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)

    def take(self, address: str) -> None:
        now = self._clock()
        tokens, at = self._buckets.pop(address, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            raise ResourceExhaustedError(
                f"client {address}: over the request rate limit of {self._rate:g} requests/s; slow down"
            )
        self._buckets[address] = (tokens - 1.0, now)
        if len(self._buckets) > MAX_TRACKED_CLIENTS:
            self._buckets.popitem(last=False)


class Admission:
    """Refuses new clients and RepositoryIndex calls while the server is over its load threshold."""

    def __init__(
        self, config: AdmissionConfig, models: ModelManager, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._config = config
        self._models = models
        self._clock = clock
        self._known: OrderedDict[str, None] = OrderedDict()
        self._snapshots: deque[tuple[float, int, int]] = deque([(clock(), 0, 0)])

    def _totals(self) -> tuple[int, int]:
        queue_ns = executions = 0
        for name in self._models.loaded_models():
            for model in self._models.ready_versions(name):
                queue_ns += model.stats.queue.ns
                executions += model.stats.execution_count
        return queue_ns, executions

    def load_metric_us(self) -> float:
        """Queue time per execution over the window, in microseconds (SuperSONIC's metric)."""
        now = self._clock()
        queue_ns, executions = self._totals()
        window_s = self._config.window_s
        # At most ~16 snapshots per window, however many clients connect.
        if now - self._snapshots[-1][0] >= window_s / 16:
            self._snapshots.append((now, queue_ns, executions))
        # The baseline is the newest snapshot at least one window old (or the oldest there is).
        while len(self._snapshots) > 1 and self._snapshots[1][0] <= now - window_s:
            self._snapshots.popleft()
        _, base_queue_ns, base_executions = self._snapshots[0]
        executed = executions - base_executions
        if executed <= 0:  # idle, or a reload reset the counters
            return 0.0
        return max(0, queue_ns - base_queue_ns) / executed / 1000.0

    def check(self, kind: CallKind, client: str) -> None:
        known = client in self._known
        if known and kind is not CallKind.INDEX:
            return
        load_us = self.load_metric_us()
        if load_us > self._config.queue_threshold_us:
            who = "RepositoryIndex" if kind is CallKind.INDEX else "new client"
            raise UnavailableError(
                f"server over its load threshold (queue time per execution {load_us:.0f} us > "
                f"{self._config.queue_threshold_us:g} us over {self._config.window_s:g} s): {who} refused; "
                "requests already admitted continue, try another server"
            )
        if not known:
            self._known[client] = None
            if len(self._known) > MAX_TRACKED_CLIENTS:
                self._known.popitem(last=False)


class Guard:
    """Every configured check, in order: authentication, rate, admission."""

    def __init__(self, config: SecurityConfig, models: ModelManager) -> None:
        self.tokens = TokenVerifier(config.auth) if config.auth is not None else None
        self.health_needs_token = config.auth is not None and config.auth.health_needs_token
        self.rate = (
            RateLimiter(config.max_requests_per_s, config.request_burst)
            if config.max_requests_per_s is not None
            else None
        )
        self.admission = Admission(config.admission, models) if config.admission is not None else None

    @classmethod
    def create(cls, config: SecurityConfig, models: ModelManager) -> Guard | None:
        """A guard, or None when nothing is configured (the frontends then skip the call entirely)."""
        if config.auth is None and config.max_requests_per_s is None and config.admission is None:
            return None
        return cls(config, models)

    def check(self, kind: CallKind, authorization: str | None, client: str, address: str) -> None:
        """``client`` names the connection (admission), ``address`` the remote host (rate limit)."""
        if kind is CallKind.HEALTH:
            if self.tokens is not None and self.health_needs_token:
                self.tokens.verify(authorization)
            return
        if self.tokens is not None:
            self.tokens.verify(authorization)
        if self.rate is not None:
            self.rate.take(address)
        if self.admission is not None:
            self.admission.check(kind, client)
