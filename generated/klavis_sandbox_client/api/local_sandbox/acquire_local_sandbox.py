from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.acquire_local_sandbox_request import AcquireLocalSandboxRequest
from ...models.acquire_local_sandbox_response import AcquireLocalSandboxResponse
from ...models.error_response import ErrorResponse
from ...models.http_validation_error import HTTPValidationError
from ...types import Response


def _get_kwargs(
    *,
    body: AcquireLocalSandboxRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/local-sandbox",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError | None:
    if response.status_code == 201:
        response_201 = AcquireLocalSandboxResponse.from_dict(response.json())

        return response_201

    if response.status_code == 400:
        response_400 = ErrorResponse.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = ErrorResponse.from_dict(response.json())

        return response_401

    if response.status_code == 422:
        response_422 = HTTPValidationError.from_dict(response.json())

        return response_422

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: AcquireLocalSandboxRequest,
) -> Response[AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError]:
    """Acquire a local sandbox

     Starts a virtual machine that hosts the requested MCP servers side by side, all of them seeing the
    same workspace. Naming a benchmark can change both the data the servers start with and which
    implementation of a server is used, so tools may differ from the benchmark-free variant.

    Args:
        body (AcquireLocalSandboxRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient | Client,
    body: AcquireLocalSandboxRequest,
) -> AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError | None:
    """Acquire a local sandbox

     Starts a virtual machine that hosts the requested MCP servers side by side, all of them seeing the
    same workspace. Naming a benchmark can change both the data the servers start with and which
    implementation of a server is used, so tools may differ from the benchmark-free variant.

    Args:
        body (AcquireLocalSandboxRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: AcquireLocalSandboxRequest,
) -> Response[AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError]:
    """Acquire a local sandbox

     Starts a virtual machine that hosts the requested MCP servers side by side, all of them seeing the
    same workspace. Naming a benchmark can change both the data the servers start with and which
    implementation of a server is used, so tools may differ from the benchmark-free variant.

    Args:
        body (AcquireLocalSandboxRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    body: AcquireLocalSandboxRequest,
) -> AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError | None:
    """Acquire a local sandbox

     Starts a virtual machine that hosts the requested MCP servers side by side, all of them seeing the
    same workspace. Naming a benchmark can change both the data the servers start with and which
    implementation of a server is used, so tools may differ from the benchmark-free variant.

    Args:
        body (AcquireLocalSandboxRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AcquireLocalSandboxResponse | ErrorResponse | HTTPValidationError
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
