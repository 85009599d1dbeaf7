"""The fake AWS refuses every request not signed (SigV4) with the credentials it was started with.

moto accepts any credentials, and the fake runs what is submitted to it (a Glue job's script, an EMR
step, a training job): whoever reaches its port could run code on its machine. :class:`SigV4Gate`
wraps moto's WSGI application and answers 403 with an AWS error body, before moto sees the request,
unless the request carries a SigV4 signature (``Authorization`` header, or a presigned URL's
``X-Amz-*`` query parameters) made with the configured access key id and secret access key. The
signature is recomputed here (AWS's documented algorithm, the one botocore and delta-rs sign with), so
a caller that knows only the key id is refused too. moto's own ``/moto-api/`` (reset, state transitions)
is refused like any unsigned request: the fake changes its backends in-process, never over HTTP.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import io
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
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


class Refused(Exception):
    """A request the gate answers with 403: ``code`` is the AWS error code for an S3 request, or for any
    other service."""

    def __init__(self, s3_code: str, code: str, message: str) -> None:
        super().__init__(message)
        self.s3_code, self.code, self.message = s3_code, code, message


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature(secret: str, amz_date: str, scope: str, canonical_request: str) -> str:
    """The SigV4 signature of a canonical request with credential scope ``date/region/service/aws4_request``."""
    date, region, service, terminal = scope.split("/")
    key = _sign(_sign(_sign(_sign(f"AWS4{secret}".encode(), date), region), service), terminal)
    digest = hashlib.sha256(canonical_request.encode()).hexdigest()
    string_to_sign = "\n".join([ALGORITHM, amz_date, scope, digest])
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _header(environ: dict[str, Any], name: str) -> str | None:
    key = name.upper().replace("-", "_")
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        return environ.get(key)
    return environ.get(f"HTTP_{key}")


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


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request body, put back as a fresh stream for moto."""
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    body = (
        stream.read(int(length))
        if length
        else (stream.read() if environ.get("wsgi.input_terminated") else b"")
    )
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return bytes(body)


def _credential_fields(credential: str) -> tuple[str, str]:
    """(access key id, scope) of ``AKID/date/region/service/aws4_request``."""
    access_key, _, scope = credential.partition("/")
    if scope.count("/") != 3 or not scope.endswith("/aws4_request"):
        raise Refused(
            "AuthorizationHeaderMalformed", "IncompleteSignature", f"malformed credential {credential!r}"
        )
    return access_key, scope


def check(environ: dict[str, Any], credentials: Credentials) -> str:
    """The service a correctly signed request is for; :class:`Refused` for any other request."""
    raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or quote(environ.get("PATH_INFO", "/"))
    raw_path, _, raw_query = raw_uri.partition("?")
    params = dict(part.partition("=")[::2] for part in raw_query.split("&")) if raw_query else {}
    authorization = _header(environ, "Authorization") or ""
    if authorization.startswith(ALGORITHM + " "):
        fields = dict(
            item.strip().partition("=")[::2] for item in authorization[len(ALGORITHM) + 1 :].split(",")
        )
        credential, signed, given = (
            fields.get("Credential", ""),
            fields.get("SignedHeaders", ""),
            fields.get("Signature", ""),
        )
        amz_date = _header(environ, "X-Amz-Date") or ""
        query = _canonical_query(raw_query)
        presigned = False
    elif "X-Amz-Credential" in params and "X-Amz-Signature" in params:
        credential, signed = (
            unquote(params["X-Amz-Credential"]),
            unquote(params.get("X-Amz-SignedHeaders", "")),
        )
        given, amz_date = params["X-Amz-Signature"], unquote(params.get("X-Amz-Date", ""))
        query = _canonical_query(raw_query, drop="X-Amz-Signature")
        presigned = True
        _check_expiry(amz_date, params.get("X-Amz-Expires", "0"))
    else:
        raise Refused("AccessDenied", "MissingAuthenticationToken", "Request is missing a SigV4 signature")
    access_key, scope = _credential_fields(credential)
    service = scope.split("/")[2]
    if not hmac.compare_digest(access_key.encode(), credentials.access_key_id.encode()):
        raise Refused(
            "InvalidAccessKeyId",
            "InvalidClientTokenId",
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    names = [n for n in signed.split(";") if n]
    headers = "".join(f"{n}:{' '.join((_header(environ, n) or '').split())}\n" for n in names)
    payload = _header(environ, "X-Amz-Content-SHA256")
    if payload is None:
        payload = UNSIGNED_PAYLOAD if presigned else hashlib.sha256(_read_body(environ)).hexdigest()
    method = environ.get("REQUEST_METHOD", "GET").upper()
    canonical = "\n".join([method, _canonical_uri(raw_path, service), query, headers, signed, payload])
    expected = signature(credentials.secret_access_key, amz_date, scope, canonical)
    if not hmac.compare_digest(expected.encode(), given.encode()):
        raise Refused(
            "SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )
    return service


def _check_expiry(amz_date: str, expires: str) -> None:
    try:
        signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        seconds = int(expires)
    except ValueError:
        raise Refused(
            "AuthorizationQueryParametersError", "IncompleteSignature", "bad X-Amz-Date/X-Amz-Expires"
        ) from None
    if dt.datetime.now(dt.timezone.utc) > signed_at + dt.timedelta(seconds=seconds):
        raise Refused("AccessDenied", "ExpiredToken", "Request has expired")


def _service_hint(environ: dict[str, Any]) -> str:
    """The service a (possibly unsigned) request names in its credential scope, if any."""
    authorization = _header(environ, "Authorization") or ""
    raw = authorization.partition("Credential=")[2] or unquote(
        (environ.get("QUERY_STRING") or "").partition("X-Amz-Credential=")[2]
    )
    parts = raw.split(",")[0].split("&")[0].split("/")
    return parts[3] if len(parts) > 3 else ""


def refusal(environ: dict[str, Any], err: Refused) -> tuple[str, list[tuple[str, str]], bytes]:
    """Status, headers and body of the AWS-style 403 for ``environ``'s protocol."""
    service = _service_hint(environ)
    request_id = str(uuid.uuid4())
    is_json = bool(_header(environ, "X-Amz-Target")) or "json" in (environ.get("CONTENT_TYPE") or "")
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
    return "403 Forbidden", headers, body


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


def gated_server(ip_address: str, port: int) -> Any:
    """A started ``ThreadedMotoServer`` whose every request passes :class:`SigV4Gate` first, with the
    credentials given to :func:`configure`."""
    if _configured is None:
        raise RuntimeError("fake_aws_auth.configure(credentials) must run before a server starts")
    credentials: Credentials = _configured
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
