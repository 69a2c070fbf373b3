from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.execution_logs_response import ExecutionLogsResponse
from ...models.http_validation_error import HTTPValidationError
from ...types import UNSET, Response, Unset


def _get_kwargs(
    local_sandbox_id: str,
    *,
    execution_name: str,
    cursor: int | Unset = 0,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["execution_name"] = execution_name

    params["cursor"] = cursor

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/local-sandbox/{local_sandbox_id}/execution-logs".format(
            local_sandbox_id=quote(str(local_sandbox_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | ExecutionLogsResponse | HTTPValidationError | None:
    if response.status_code == 200:
        response_200 = ExecutionLogsResponse.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = ErrorResponse.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = ErrorResponse.from_dict(response.json())

        return response_401

    if response.status_code == 404:
        response_404 = ErrorResponse.from_dict(response.json())

        return response_404

    if response.status_code == 422:
        response_422 = HTTPValidationError.from_dict(response.json())

        return response_422

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[ErrorResponse | ExecutionLogsResponse | HTTPValidationError]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    execution_name: str,
    cursor: int | Unset = 0,
) -> Response[ErrorResponse | ExecutionLogsResponse | HTTPValidationError]:
    """Read new output of an execution

     Answers the execution's status and the log bytes written since `cursor`, plus the cursor to send
    next time. Polling with the returned cursor streams the whole log.

    Args:
        local_sandbox_id (str):
        execution_name (str):
        cursor (int | Unset):  Default: 0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | ExecutionLogsResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        local_sandbox_id=local_sandbox_id,
        execution_name=execution_name,
        cursor=cursor,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    execution_name: str,
    cursor: int | Unset = 0,
) -> ErrorResponse | ExecutionLogsResponse | HTTPValidationError | None:
    """Read new output of an execution

     Answers the execution's status and the log bytes written since `cursor`, plus the cursor to send
    next time. Polling with the returned cursor streams the whole log.

    Args:
        local_sandbox_id (str):
        execution_name (str):
        cursor (int | Unset):  Default: 0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | ExecutionLogsResponse | HTTPValidationError
    """

    return sync_detailed(
        local_sandbox_id=local_sandbox_id,
        client=client,
        execution_name=execution_name,
        cursor=cursor,
    ).parsed


async def asyncio_detailed(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    execution_name: str,
    cursor: int | Unset = 0,
) -> Response[ErrorResponse | ExecutionLogsResponse | HTTPValidationError]:
    """Read new output of an execution

     Answers the execution's status and the log bytes written since `cursor`, plus the cursor to send
    next time. Polling with the returned cursor streams the whole log.

    Args:
        local_sandbox_id (str):
        execution_name (str):
        cursor (int | Unset):  Default: 0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | ExecutionLogsResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        local_sandbox_id=local_sandbox_id,
        execution_name=execution_name,
        cursor=cursor,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    execution_name: str,
    cursor: int | Unset = 0,
) -> ErrorResponse | ExecutionLogsResponse | HTTPValidationError | None:
    """Read new output of an execution

     Answers the execution's status and the log bytes written since `cursor`, plus the cursor to send
    next time. Polling with the returned cursor streams the whole log.

    Args:
        local_sandbox_id (str):
        execution_name (str):
        cursor (int | Unset):  Default: 0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | ExecutionLogsResponse | HTTPValidationError
    """

    return (
        await asyncio_detailed(
            local_sandbox_id=local_sandbox_id,
            client=client,
            execution_name=execution_name,
            cursor=cursor,
        )
    ).parsed
