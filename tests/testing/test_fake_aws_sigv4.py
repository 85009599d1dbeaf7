"""The fake AWS's request check does what AWS does, so a captured request is worth nothing later or with
another body (issue #48): requests signed by botocore's own signers, checked in-process (milliseconds)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
from unittest import mock
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from airflow_provider_dltrain.testing import fake_aws_auth as auth
from airflow_provider_dltrain.testing.fake_aws_payload import ChunkSigner, Refused, verify_chunks

KEYS = auth.Credentials("AKFATESTKEY000000000", "per-start-secret")
ENDPOINT = "http://127.0.0.1:9"
URL = f"{ENDPOINT}/scripts/job.py"


def _signed(method: str, url: str, body: bytes = b"", *, at: dt.datetime | None = None, service: str = "s3",
            headers: dict[str, str] | None = None, payload: str | None = None) -> AWSRequest:  # fmt: skip
    """``request`` signed by botocore at ``at`` (now); ``payload``: the payload hash it claims and signs."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    signer = S3SigV4Auth if service == "s3" else SigV4Auth
    creds = BotoCredentials(KEYS.access_key_id, KEYS.secret_access_key)
    claims = (
        mock.patch.object(signer, "payload", return_value=payload) if payload else contextlib.nullcontext()
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=at or dt.datetime.now(dt.UTC)), claims:
        signer(creds, service, "us-east-1").add_auth(request)
    return request


def _environ(request: AWSRequest, body: bytes | None = None) -> dict:
    """The WSGI environ werkzeug builds for ``request``, its body replaced by ``body`` when given."""
    parts = urlsplit(request.url)
    data = request.body if body is None else body
    data = data.encode() if isinstance(data, str) else (data or b"")
    environ = {
        "REQUEST_METHOD": request.method,
        "RAW_URI": parts.path + (f"?{parts.query}" if parts.query else ""),
        "CONTENT_LENGTH": str(len(data)),
        "wsgi.input": io.BytesIO(data),
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    environ["HTTP_HOST"] = parts.netloc
    return environ


def _refused(environ: dict, code: str) -> Refused:
    with pytest.raises(Refused) as info:
        auth.check(environ, KEYS)
    assert info.value.s3_code == code, info.value.message
    return info.value


def test_a_signed_put_passes_and_moto_gets_its_body():
    environ = _environ(_signed("PUT", URL, b"print('glue job')"))
    assert auth.check(environ, KEYS) == "s3"
    assert environ["wsgi.input"].read() == b"print('glue job')"


def test_a_captured_put_replayed_with_another_body_is_refused():
    captured = _signed("PUT", URL, b"print('the real job')")
    _refused(_environ(captured, body=b"import os; os.system('id')"), "XAmzContentSHA256Mismatch")


@pytest.mark.parametrize("age", [dt.timedelta(minutes=16), dt.timedelta(days=1), -dt.timedelta(minutes=16)])
def test_a_request_signed_more_than_15_minutes_from_now_is_refused(age):
    old = _signed("PUT", URL, b"x", at=dt.datetime.now(dt.UTC) - age)
    _refused(_environ(old), "RequestTimeTooSkewed")
    fresh = _signed("PUT", URL, b"x", at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=14))
    assert auth.check(_environ(fresh), KEYS) == "s3"


def test_a_presigned_url_valid_for_more_than_7_days_is_refused():
    creds = BotoCredentials(KEYS.access_key_id, KEYS.secret_access_key)
    for expires, allowed in ((7 * 24 * 3600, True), (7 * 24 * 3600 + 1, False)):
        request = AWSRequest(method="GET", url=URL)
        S3SigV4QueryAuth(creds, "s3", "us-east-1", expires=expires).add_auth(request)
        environ = _environ(request)
        if allowed:
            assert auth.check(environ, KEYS) == "s3"
        else:
            _refused(environ, "AuthorizationQueryParametersError")


def test_a_wrong_signature_is_refused_before_the_body_is_read():
    request = _signed("PUT", URL, b"x" * 10)
    environ = _environ(request)
    environ["HTTP_AUTHORIZATION"] = environ["HTTP_AUTHORIZATION"][:-4] + "0000"
    environ["wsgi.input"] = mock.Mock(read=mock.Mock(side_effect=AssertionError("body read")))
    _refused(environ, "SignatureDoesNotMatch")


def test_a_body_over_the_limit_is_refused_from_its_length_without_reading_it():
    """Other services sign a hash they do not send, so their body is read first: never a large one."""
    request = _signed(
        "POST", f"{ENDPOINT}/", b"{}", service="glue", headers={"X-Amz-Target": "AWSGlue.GetJobs"}
    )
    environ = _environ(request)
    environ["CONTENT_LENGTH"] = str(auth.MAX_API_BODY + 1)
    environ["wsgi.input"] = mock.Mock(read=mock.Mock(side_effect=AssertionError("body read")))
    err = _refused(environ, "EntityTooLarge")
    assert err.status.startswith("400")
    s3 = _environ(_signed("PUT", URL, b"x"))
    s3["CONTENT_LENGTH"] = str(auth.MAX_S3_BODY + 1)
    _refused(s3, "EntityTooLarge")


def test_unsigned_payload_is_accepted_for_s3_only():
    s3 = _signed("PUT", URL, b"x", payload="UNSIGNED-PAYLOAD")
    assert s3.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert auth.check(_environ(s3), KEYS) == "s3"
    glue = _signed("POST", f"{ENDPOINT}/", b"{}", service="glue", headers={"X-Amz-Target": "AWSGlue.GetJobs"})
    environ = _environ(glue)
    environ["HTTP_X_AMZ_CONTENT_SHA256"] = "UNSIGNED-PAYLOAD"
    _refused(environ, "InvalidRequest")


def _aws_example_chunks(corrupt: bool = False) -> bytes:
    """The body of AWS's documented streaming PUT (sigv4-streaming): 65536 + 1024 bytes of 'a'."""
    chunks = [
        (65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
        (1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"),
        (0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"),
    ]
    body = b""
    for size, sig in chunks:
        data = b"a" * size if not (corrupt and size == 1024) else b"b" * size
        body += f"{size:x};chunk-signature={sig}\r\n".encode() + data + b"\r\n"
    return body


def test_aws_chunked_signatures_are_verified_against_awss_published_example():
    scope = "20130524/us-east-1/s3/aws4_request"
    key = auth.signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", scope)
    seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    signer = ChunkSigner(key, "20130524T000000Z", scope, seed)
    body = io.BytesIO(_aws_example_chunks())
    verify_chunks(body, signer, trailer=False)
    assert body.tell() == 0  # left for moto, which decodes it
    with pytest.raises(Refused, match="chunk signature"):
        verify_chunks(io.BytesIO(_aws_example_chunks(corrupt=True)), signer, trailer=False)


def test_a_signed_streaming_put_passes_and_a_chunk_swapped_in_transit_is_refused():
    headers = {"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": "5"}
    request = _signed("PUT", URL, b"", headers=headers, payload="STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    seed = request.headers["Authorization"].rpartition("Signature=")[2]
    scope = request.headers["Authorization"].split("Credential=")[1].split(",")[0].split("/", 1)[1]
    signer = ChunkSigner(
        auth.signing_key(KEYS.secret_access_key, scope), request.headers["X-Amz-Date"], scope, seed
    )

    def body(data: bytes) -> bytes:
        first = signer.sign("PAYLOAD", seed, hashlib.sha256(b"hello").hexdigest())
        last = signer.sign("PAYLOAD", first, hashlib.sha256(b"").hexdigest())
        return (
            f"5;chunk-signature={first}\r\n".encode()
            + data
            + f"\r\n0;chunk-signature={last}\r\n\r\n".encode()
        )

    assert auth.check(_environ(request, body(b"hello")), KEYS) == "s3"
    _refused(_environ(request, body(b"hullo")), "SignatureDoesNotMatch")


def test_a_streaming_payload_of_an_unknown_kind_is_refused_with_s3s_not_implemented():
    request = _signed("PUT", URL, b"x", payload="STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
    err = _refused(_environ(request), "NotImplemented")
    assert err.status.startswith("501")


def test_no_listener_off_loopback_with_the_well_known_keys_container_gateway_included():
    """In container mode the fake also listens on its Docker network's gateway (fake_ec2.NodeNetwork
    calls gated_server(gateway)): tested here without Docker, as the decision that server makes."""
    well_known = auth.Credentials("testing", "testing")
    for address in ("0.0.0.0", "10.77.3.1"):
        with pytest.raises(ValueError, match="well-known test keys"):
            auth.check_listener(address, well_known)
        auth.check_listener(address, KEYS)  # per-start keys: containers reach it with them
    auth.check_listener("127.0.0.1", well_known)  # asked for explicitly, loopback only
    with mock.patch.object(auth, "_configured", well_known), pytest.raises(ValueError, match=r"0\.0\.0\.0"):
        auth.gated_server("0.0.0.0", 0)


def test_the_body_hash_a_client_sends_is_what_botocore_signs():
    request = _signed("PUT", URL, b"abc")
    assert request.headers["X-Amz-Content-SHA256"] == hashlib.sha256(b"abc").hexdigest()
