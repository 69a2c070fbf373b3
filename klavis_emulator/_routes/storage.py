"""Routes behind signed URLs: ``PUT /_storage/upload/<key>`` and ``GET
/_storage/download/<key>`` (no API key: the signature in the query is the authorization)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, Final

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ._shared import State, error_response

__all__ = ["router"]

_DOWNLOAD_CHUNK: Final = 256 * 1024

router = APIRouter(prefix="/_storage", tags=["storage"])


@router.put("/upload/{key:path}")
async def storage_upload(
    key: str,
    request: Request,
    state: State,
    expires: str | None = None,
    signature: str | None = None,
) -> JSONResponse:
    """Receive an upload to a signed URL (streamed to disk)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    length_header = request.headers.get("content-length")
    content_length = int(length_header) if length_header and length_header.isdigit() else None
    writer = await anyio.to_thread.run_sync(
        lambda: state.begin_upload(
            key, expires=expires, signature=signature, content_length=content_length
        )
    )
    if content_type not in ("application/gzip", "application/x-gzip"):
        writer.abort()
        return error_response(
            400,
            "Uploads must carry the header 'Content-Type: application/gzip' "
            f"(got {content_type[:80] or 'none'!r}).",
        )
    try:
        async for chunk in request.stream():
            if chunk:
                writer.write(chunk)
        await anyio.to_thread.run_sync(writer.commit)
    except BaseException:
        writer.abort()
        raise
    return JSONResponse({"message": "Upload stored", "size": writer.size})


@router.get("/download/{key:path}")
def storage_download(
    key: str, state: State, expires: str | None = None, signature: str | None = None
) -> StreamingResponse:
    """Stream an object behind a signed download URL."""
    stream, size = state.open_download(key, expires=expires, signature=signature)
    return StreamingResponse(
        _iter_file(stream),
        media_type="application/gzip",
        headers={"Content-Length": str(size)},
    )


def _iter_file(stream: BinaryIO) -> Iterator[bytes]:
    with stream:
        while chunk := stream.read(_DOWNLOAD_CHUNK):
            yield chunk
