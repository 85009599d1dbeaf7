"""The body side of the fake AWS's request check (``fake_aws_auth``): the payload hash a request signs,
its declared length, and the bound on it.

A request's signature covers its body's SHA-256. S3 sends that hash in ``X-Amz-Content-SHA256``, so
its signature is checked before a byte of the body is read, then the body is hashed as it is read and
compared (``XAmzContentSHA256Mismatch``). ``UNSIGNED-PAYLOAD`` is S3's alone (and every presigned
URL's), as on AWS; ``aws-chunked`` streaming payloads (``STREAMING-...``) are refused with S3's
``NotImplemented`` unless they are S3's (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``, with or without a
trailer, whose every chunk signature, chained from the request's, is verified: :func:`verify_chunks`;
``STREAMING-UNSIGNED-PAYLOAD-TRAILER``, unsigned like ``UNSIGNED-PAYLOAD``). Other services do not send the hash,
so their (small) body is read first, bounded by :data:`MAX_API_BODY`. Every body is bounded by its
``Content-Length``, refused before it is read when over the limit; a body without one (sent chunked)
is refused with ``MissingContentLength``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tempfile
from dataclasses import dataclass
from typing import IO, Any

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_S3_BODY = 1 << 30  # 1 GiB: far above a test's objects (S3's own limit for one PUT is 5 GiB)
MAX_API_BODY = 16 << 20  # 16 MiB: every other service's requests are small JSON or form bodies
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
SIGNED_CHUNKS = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
SIGNED_CHUNKS_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"  # like UNSIGNED-PAYLOAD: S3 takes it unsigned
STREAMING = (SIGNED_CHUNKS, SIGNED_CHUNKS_TRAILER, UNSIGNED_TRAILER)
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class Refused(Exception):
    """A request the gate refuses (403 unless ``status`` says otherwise): ``s3_code`` is the AWS error
    code for an S3 request, ``code`` for any other service."""

    def __init__(self, s3_code: str, code: str, message: str, status: str = "403 Forbidden") -> None:
        super().__init__(message)
        self.s3_code, self.code, self.message, self.status = s3_code, code, message, status


def header(environ: dict[str, Any], name: str) -> str | None:
    key = name.upper().replace("-", "_")
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        return environ.get(key)
    return environ.get(f"HTTP_{key}")


def _too_large(limit: int) -> Refused:
    return Refused(
        "EntityTooLarge",
        "RequestEntityTooLarge",
        f"Your proposed upload exceeds the maximum allowed size ({limit} bytes).",
        "400 Bad Request",
    )


def _content_length(environ: dict[str, Any], limit: int) -> int | None:
    """The declared body length, or None for an aws-chunked body sent with HTTP chunked transfer (as
    the AWS C++ SDK sends UploadPart), which declares its decoded length instead. Refused when a body
    declares no length, or one over ``limit``."""
    length = environ.get("CONTENT_LENGTH") or ""
    chunked = (header(environ, "Transfer-Encoding") or "").lower() == "chunked"
    decoded = header(environ, "X-Amz-Decoded-Content-Length") or ""
    if not length and chunked and decoded.isdigit():
        if int(decoded) > limit:
            raise _too_large(limit)
        return None
    if not length and chunked:
        raise Refused(
            "MissingContentLength",
            "MissingContentLength",
            "You must provide the Content-Length HTTP header.",
            "411 Length Required",
        )
    if length and not length.isdigit():
        raise Refused("InvalidArgument", "InvalidParameterValue", "bad Content-Length", "400 Bad Request")
    if int(length or 0) > limit:
        raise _too_large(limit)
    return int(length or 0)


def read_body(environ: dict[str, Any], limit: int) -> str:
    """Read the body (at most ``limit`` bytes, by its declared length) into a fresh stream for moto;
    its SHA-256, hex."""
    length = _content_length(environ, limit)
    # chunk headers add a few bytes per chunk of at least 8 KiB: 1 % over the decoded limit is plenty
    left = length if length is not None else limit + limit // 100 + 65536
    stream, digest = environ["wsgi.input"], hashlib.sha256()
    # a large upload goes to disk, not memory; moto reads it, and it goes with the request
    body = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115
    read = 0
    while read < left:
        chunk = stream.read(min(left - read, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        body.write(chunk)
        read += len(chunk)
    if length is None and stream.read(1):
        raise _too_large(limit)
    body.seek(0)
    environ["wsgi.input"] = body
    environ["CONTENT_LENGTH"] = str(read)
    environ.pop("HTTP_TRANSFER_ENCODING", None)  # moto gets the body with its length, as read
    return digest.hexdigest()


def claimed_payload(environ: dict[str, Any], service: str, presigned: bool) -> str | None:
    """The payload hash the request signs: the S3 header's value, UNSIGNED-PAYLOAD for a presigned URL,
    or None where it must be computed from the body (the other services). Refused as AWS refuses."""
    claimed = header(environ, "X-Amz-Content-SHA256")
    if presigned:
        return UNSIGNED_PAYLOAD
    if service != "s3":
        if claimed is not None and not _SHA256_HEX.match(claimed):  # UNSIGNED-PAYLOAD is S3's alone
            raise Refused("InvalidRequest", "IncompleteSignature", "x-amz-content-sha256 must be the "
                          "body's SHA-256 for this service", "400 Bad Request")  # fmt: skip
        return None
    if claimed is None:
        raise Refused(
            "InvalidRequest",
            "InvalidRequest",
            "Missing required header for this request: x-amz-content-sha256",
            "400 Bad Request",
        )
    if claimed.startswith("STREAMING-") and claimed not in STREAMING:
        raise Refused(
            "NotImplemented",
            "NotImplemented",
            f"A header you provided implies functionality that is not implemented: {claimed[:60]}",
            "501 Not Implemented",
        )
    if claimed not in (UNSIGNED_PAYLOAD, *STREAMING) and not _SHA256_HEX.match(claimed):
        raise Refused(
            "InvalidArgument",
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a valid sha256 value.",
            "400 Bad Request",
        )
    return claimed


@dataclass(frozen=True)
class ChunkSigner:
    """What signs an aws-chunked body: the request's signing key, date and scope; ``seed`` is the
    request's own signature, which the first chunk's signature chains from."""

    key: bytes
    amz_date: str
    scope: str
    seed: str

    def sign(self, kind: str, previous: str, digest: str) -> str:
        parts = [f"AWS4-HMAC-SHA256-{kind}", self.amz_date, self.scope, previous]
        parts += [_EMPTY_SHA256, digest] if kind == "PAYLOAD" else [digest]
        return hmac.new(self.key, "\n".join(parts).encode(), hashlib.sha256).hexdigest()


def _chunk_mismatch(what: str) -> Refused:
    return Refused(
        "SignatureDoesNotMatch",
        "SignatureDoesNotMatch",
        f"The {what} signature we calculated does not match the one you provided.",
    )


def verify_chunks(body: IO[bytes], signer: ChunkSigner, trailer: bool) -> None:
    """Refused unless every chunk of an aws-chunked ``body`` (and its trailer) carries the signature
    chained from ``signer.seed``; ``body`` is left at its start for moto, which decodes it."""
    previous = signer.seed
    while True:
        size_text, _, extension = body.readline(256).rstrip(b"\r\n").partition(b";")
        try:
            size = int(size_text, 16)
        except ValueError:
            raise Refused("IncompleteBody", "IncompleteSignature", "a malformed aws-chunked body",
                          "400 Bad Request") from None  # fmt: skip
        data = body.read(size)
        expected = signer.sign("PAYLOAD", previous, hashlib.sha256(data).hexdigest())
        given = extension.partition(b"chunk-signature=")[2].decode(errors="replace")
        if len(data) != size or not hmac.compare_digest(expected, given):
            raise _chunk_mismatch("chunk")
        previous = expected
        if size == 0:
            break
        body.read(2)  # the chunk's CRLF
    if trailer:
        lines = [
            line.rstrip(b"\r\n").decode(errors="replace") for line in iter(lambda: body.readline(1024), b"")
        ]
        given = next((ln.partition(":")[2] for ln in lines if ln.startswith("x-amz-trailer-signature:")), "")
        canonical = "".join(f"{ln}\n" for ln in lines if ln and not ln.startswith("x-amz-trailer-signature:"))
        expected = signer.sign("TRAILER", previous, hashlib.sha256(canonical.encode()).hexdigest())
        if not hmac.compare_digest(expected, given.strip()):
            raise _chunk_mismatch("trailer")
    body.seek(0)
