"""The fake AWS refuses every request not signed (SigV4) with the credentials it was started with.

moto accepts any credentials, and the fake runs what is submitted to it (a Glue job's script, an EMR
step, a training job): whoever reaches its port could run code on its machine. :class:`SigV4Gate`
wraps moto's WSGI application and answers 403 with an AWS error body, before moto sees the request,
unless the request carries a SigV4 signature (``Authorization`` header, or a presigned URL's
``X-Amz-*`` query parameters) made with the configured access key id and secret access key. The
signature is recomputed here (AWS's documented algorithm, the one botocore and delta-rs sign with), so
a caller that knows only the key id is refused too. moto's own ``/moto-api/`` (reset, state transitions)
is refused like any unsigned request: the fake changes its backends in-process, never over HTTP.

What AWS checks besides the signature is checked too, so a captured request cannot be replayed
later or with another body: ``X-Amz-Date`` within 15 minutes of the clock (``RequestTimeTooSkewed``),
a presigned URL's ``X-Amz-Expires`` at most 7 days, and the body against the signed hash, bounded in
size and, for S3, read only once the signature has passed (``fake_aws_payload``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

from airflow_provider_dltrain.testing.fake_aws_payload import (
    MAX_API_BODY,
    MAX_S3_BODY,
    SIGNED_CHUNKS,
    SIGNED_CHUNKS_TRAILER,
    UNSIGNED_PAYLOAD,
    UNSIGNED_TRAILER,
    ChunkSigner,
    Refused,
    claimed_payload,
    header,
    read_body,
    verify_chunks,
)

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = (UNSIGNED_PAYLOAD, UNSIGNED_TRAILER)  # S3 bodies whose bytes no signature covers, as on AWS
MAX_SKEW = dt.timedelta(minutes=15)  # AWS's limit between X-Amz-Date and its clock
MAX_EXPIRES_S = 7 * 24 * 3600  # a presigned URL lives at most a week (SigV4)
WELL_KNOWN_KEY = "testing"  # moto's documented test keys: anyone can guess them
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# services botocore speaks REST-JSON to without an X-Amz-Target header
REST_JSON_SERVICES = {"emr-serverless"}

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Credentials:
    """The only credentials the fake accepts."""

    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:  # never print the secret
        return f"Credentials(access_key_id={self.access_key_id!r}, secret_access_key=***)"


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, scope: str) -> bytes:
    """SigV4's key for credential scope ``date/region/service/aws4_request``."""
    date, region, service, terminal = scope.split("/")
    return _sign(_sign(_sign(_sign(f"AWS4{secret}".encode(), date), region), service), terminal)


def signature(secret: str, amz_date: str, scope: str, canonical_request: str) -> str:
    """The SigV4 signature of a canonical request with credential scope ``date/region/service/aws4_request``."""
    key = signing_key(secret, scope)
    digest = hashlib.sha256(canonical_request.encode()).hexdigest()
    string_to_sign = "\n".join([ALGORITHM, amz_date, scope, digest])
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_query(raw_query: str, drop: str | None = None) -> str:
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        key, _, value = part.partition("=")
        # "+" is a space in a query (delta-rs sends it so), a literal "+" arrives as %2B
        key, value = unquote_plus(key), unquote_plus(value)
        if key == drop:
            continue
        pairs.append((quote(key, safe="-_.~"), quote(value, safe="-_.~")))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _canonical_uri(raw_path: str, service: str) -> str:
    path = raw_path or "/"
    # S3 signs the path as sent; every other service signs it URI-encoded once more (botocore does so)
    return path if service == "s3" else quote(path, safe="/~")


def _credential_fields(credential: str) -> tuple[str, str]:
    """(access key id, scope) of ``AKID/date/region/service/aws4_request``."""
    access_key, _, scope = credential.partition("/")
    if scope.count("/") != 3 or not scope.endswith("/aws4_request"):
        raise Refused(
            "AuthorizationHeaderMalformed", "IncompleteSignature", f"malformed credential {credential!r}"
        )
    return access_key, scope


@dataclass(frozen=True)
class _Signed:
    """What a request claims: its credential, signed headers, signature, date and canonical query."""

    credential: str
    signed: str
    given: str
    amz_date: str
    query: str
    presigned: bool


def _signed_parts(environ: dict[str, Any], raw_query: str) -> _Signed:
    """The SigV4 fields of the ``Authorization`` header or of a presigned URL; Refused if neither."""
    params = dict(part.partition("=")[::2] for part in raw_query.split("&")) if raw_query else {}
    authorization = header(environ, "Authorization") or ""
    if authorization.startswith(ALGORITHM + " "):
        fields = dict(
            item.strip().partition("=")[::2] for item in authorization[len(ALGORITHM) + 1 :].split(",")
        )
        amz_date = header(environ, "X-Amz-Date") or ""
        _check_date(amz_date, 0)
        return _Signed(
            fields.get("Credential", ""),
            fields.get("SignedHeaders", ""),
            fields.get("Signature", ""),
            amz_date,
            _canonical_query(raw_query),
            False,
        )
    if "X-Amz-Credential" in params and "X-Amz-Signature" in params:
        amz_date = unquote(params.get("X-Amz-Date", ""))
        _check_date(amz_date, _expires(params.get("X-Amz-Expires", "")))
        return _Signed(
            unquote(params["X-Amz-Credential"]),
            unquote(params.get("X-Amz-SignedHeaders", "")),
            params["X-Amz-Signature"],
            amz_date,
            _canonical_query(raw_query, drop="X-Amz-Signature"),
            True,
        )
    raise Refused("AccessDenied", "MissingAuthenticationToken", "Request is missing a SigV4 signature")


def check(environ: dict[str, Any], credentials: Credentials) -> str:
    """The service a correctly signed request is for; :class:`Refused` for any other request. The
    signature is checked before an S3 body is read, and the body's hash after (see the module)."""
    raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or quote(environ.get("PATH_INFO", "/"))
    raw_path, _, raw_query = raw_uri.partition("?")
    parts = _signed_parts(environ, raw_query)
    access_key, scope = _credential_fields(parts.credential)
    service = scope.split("/")[2]
    if not hmac.compare_digest(access_key.encode(), credentials.access_key_id.encode()):
        raise Refused(
            "InvalidAccessKeyId",
            "InvalidClientTokenId",
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    claimed = claimed_payload(environ, service, parts.presigned)
    payload = claimed or read_body(environ, MAX_API_BODY)  # other services sign a hash they don't send
    names = [n for n in parts.signed.split(";") if n]
    headers = "".join(f"{n}:{' '.join((header(environ, n) or '').split())}\n" for n in names)
    method = environ.get("REQUEST_METHOD", "GET").upper()
    canonical = "\n".join(
        [method, _canonical_uri(raw_path, service), parts.query, headers, parts.signed, payload]
    )
    expected = signature(credentials.secret_access_key, parts.amz_date, scope, canonical)
    if not hmac.compare_digest(expected.encode(), parts.given.encode()):
        raise Refused(
            "SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
    if claimed in (SIGNED_CHUNKS, SIGNED_CHUNKS_TRAILER):
        read_body(environ, MAX_S3_BODY)
        signer = ChunkSigner(
            signing_key(credentials.secret_access_key, scope), parts.amz_date, scope, expected
        )
        verify_chunks(environ["wsgi.input"], signer, trailer=claimed == SIGNED_CHUNKS_TRAILER)
    elif claimed is not None and read_body(environ, MAX_S3_BODY) != claimed and claimed not in UNSIGNED:
        raise Refused(
            "XAmzContentSHA256Mismatch",
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
            "400 Bad Request",
        )
    return service


def _expires(text: str) -> int:
    """A presigned URL's X-Amz-Expires in seconds; Refused unless 1 s to 7 days (AWS's bounds)."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_EXPIRES_S:
        raise Refused(
            "AuthorizationQueryParametersError",
            "IncompleteSignature",
            f"X-Amz-Expires must be a number of seconds from 1 to {MAX_EXPIRES_S} (a week)",
            "400 Bad Request",
        )
    return int(text)


def _check_date(amz_date: str, expires_s: int) -> None:
    """Refused unless ``amz_date`` is within 15 minutes of now (a presigned URL: until it expires)."""
    try:
        signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise Refused("AccessDenied", "IncompleteSignature", "X-Amz-Date is missing or not a date") from None
    now = dt.datetime.now(dt.timezone.utc)
    if signed_at - now > MAX_SKEW:
        raise Refused(
            "RequestTimeTooSkewed",
            "InvalidSignatureException",
            "The difference between the request time and the current time is too large.",
        )
    if expires_s:
        if now > signed_at + dt.timedelta(seconds=expires_s):
            raise Refused("AccessDenied", "ExpiredToken", "Request has expired")
    elif now - signed_at > MAX_SKEW:
        raise Refused(
            "RequestTimeTooSkewed",
            "InvalidSignatureException",
            "The difference between the request time and the current time is too large.",
        )


def _service_hint(environ: dict[str, Any]) -> str:
    """The service a (possibly unsigned) request names in its credential scope, if any."""
    authorization = header(environ, "Authorization") or ""
    raw = authorization.partition("Credential=")[2] or unquote(
        (environ.get("QUERY_STRING") or "").partition("X-Amz-Credential=")[2]
    )
    parts = raw.split(",")[0].split("&")[0].split("/")
    return parts[3] if len(parts) > 3 else ""


def refusal(environ: dict[str, Any], err: Refused) -> tuple[str, list[tuple[str, str]], bytes]:
    """Status, headers and body of the AWS-style 403 for ``environ``'s protocol."""
    service = _service_hint(environ)
    request_id = str(uuid.uuid4())
    is_json = bool(header(environ, "X-Amz-Target")) or "json" in (environ.get("CONTENT_TYPE") or "")
    if service == "s3" or not (is_json or service in REST_JSON_SERVICES):
        code = err.s3_code if service == "s3" else err.code
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse><Error><Type>Sender</Type>'
            f"<Code>{code}</Code><Message>{err.message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        content_type = "application/xml"
    else:
        code = "UnrecognizedClientException" if err.code == "InvalidClientTokenId" else err.code
        body = json.dumps({"__type": code, "message": err.message}).encode()
        content_type = "application/x-amz-json-1.1"
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("x-amzn-ErrorType", code),
        ("x-amzn-RequestId", request_id),
    ]
    return err.status, headers, body


class SigV4Gate:
    """WSGI middleware: ``app`` sees only requests signed with ``credentials`` (see the module docstring)."""

    def __init__(self, app: WsgiApp, credentials: Credentials) -> None:
        self.app, self.credentials = app, credentials

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            check(environ, self.credentials)
        except Refused as err:
            status, headers, body = refusal(environ, err)
            start_response(status, headers)
            return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]
        return self.app(environ, start_response)


_configured: Credentials | None = None


def configure(credentials: Credentials) -> None:
    """The credentials every :func:`gated_server` of this process accepts (the fake's, set once)."""
    global _configured
    _configured = credentials


def check_listener(ip_address: str, credentials: Credentials) -> None:
    """ValueError unless the well-known test keys stay on loopback: a listener on any other address
    (``0.0.0.0``, a Docker network's gateway) runs jobs for whoever reaches it and knows the keys."""
    if ip_address not in LOOPBACK and WELL_KNOWN_KEY in (
        credentials.access_key_id,
        credentials.secret_access_key,
    ):
        raise ValueError(
            f"refusing to listen on {ip_address} with the well-known test keys: whoever reaches that "
            "address could run code here; start the fake with fresh or own keys"
        )


def gated_server(ip_address: str, port: int) -> Any:
    """A started ``ThreadedMotoServer`` whose every request passes :class:`SigV4Gate` first, with the
    credentials given to :func:`configure`; ValueError for a listener :func:`check_listener` refuses."""
    if _configured is None:
        raise RuntimeError("fake_aws_auth.configure(credentials) must run before a server starts")
    credentials: Credentials = _configured
    check_listener(ip_address, credentials)
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class GatedMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = SigV4Gate(DomainDispatcherApplication(create_backend_app), credentials)
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    server = GatedMotoServer(ip_address=ip_address, port=port, verbose=False)
    server.start()
    return server
