"""moto's S3 server with atomic conditional writes.

``python -m airflow_provider_dltrain.testing.moto_server -H HOST -p PORT`` takes ``python -m
moto.server``'s arguments; the fake AWS installs the same patch in its own server. delta-rs makes every
commit a put-if-absent (``If-None-Match: *``), and a conditional put must be atomic: of two writers
of one commit version exactly one wins and the other gets 412. moto 5.2.5 checks the condition and
then stores the object as two separate steps (``S3Response.put_object``, and likewise
``CompleteMultipartUpload``), while the werkzeug server handles each request in its own thread. Two
writers can thus both pass the check and both get 200, the later object silently replacing the
earlier commit - a lost commit that real S3 never produces. Here every object write of the server
(PUT and POST on a key: put, copy, multipart completion) runs under one process-wide lock, so the
check and the store happen as one step. Request bodies are read before the handler runs, so the
lock covers only the in-memory store.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

_WRITES = threading.Lock()


def _serialized(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _WRITES:
            return handler(*args, **kwargs)

    return locked


def install() -> None:
    """Make moto's S3 object writes (conditions checked inside them) atomic in this process."""
    from moto.s3.responses import S3Response

    for name in ("_key_response_put", "_key_response_post"):
        setattr(S3Response, name, _serialized(getattr(S3Response, name)))


if __name__ == "__main__":
    from moto.server import main

    install()
    main(sys.argv[1:])
