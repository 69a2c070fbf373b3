from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.execute_request import ExecuteRequest
from ...models.execute_response import ExecuteResponse
from ...models.gcs_region import GCSRegion
from ...models.http_validation_error import HTTPValidationError
from ...types import UNSET, Response, Unset


def _get_kwargs(
    local_sandbox_id: str,
    *,
    body: ExecuteRequest,
    region: GCSRegion | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    params: dict[str, Any] = {}

    json_region: str | Unset = UNSET
    if not isinstance(region, Unset):
        json_region = region.value

    params["region"] = json_region

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/local-sandbox/{local_sandbox_id}/execute".format(
            local_sandbox_id=quote(str(local_sandbox_id), safe=""),
        ),
        "params": params,
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | ExecuteResponse | HTTPValidationError | None:
    if response.status_code == 200:
        response_200 = ExecuteResponse.from_dict(response.json())

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

    if response.status_code == 409:
        response_409 = ErrorResponse.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = ErrorResponse.from_dict(response.json())

        return response_413

    if response.status_code == 422:
        response_422 = HTTPValidationError.from_dict(response.json())

        return response_422

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[ErrorResponse | ExecuteResponse | HTTPValidationError]:
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
    body: ExecuteRequest,
    region: GCSRegion | Unset = UNSET,
) -> Response[ErrorResponse | ExecuteResponse | HTTPValidationError]:
    """Run an uploaded execution archive

     Fetches the archive uploaded under the execution name, installs its declared dependencies and runs
    its `main.py` inside the sandbox. The call returns once the run has started; follow it with
    `execution-status` or `execution-logs`.

    Args:
        local_sandbox_id (str):
        region (GCSRegion | Unset): Which storage bucket region signed URLs point at. Picking the
            region closest to the caller speeds up transfers; the sandbox reaches either region.
        body (ExecuteRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | ExecuteResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        local_sandbox_id=local_sandbox_id,
        body=body,
        region=region,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: ExecuteRequest,
    region: GCSRegion | Unset = UNSET,
) -> ErrorResponse | ExecuteResponse | HTTPValidationError | None:
    """Run an uploaded execution archive

     Fetches the archive uploaded under the execution name, installs its declared dependencies and runs
    its `main.py` inside the sandbox. The call returns once the run has started; follow it with
    `execution-status` or `execution-logs`.

    Args:
        local_sandbox_id (str):
        region (GCSRegion | Unset): Which storage bucket region signed URLs point at. Picking the
            region closest to the caller speeds up transfers; the sandbox reaches either region.
        body (ExecuteRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | ExecuteResponse | HTTPValidationError
    """

    return sync_detailed(
        local_sandbox_id=local_sandbox_id,
        client=client,
        body=body,
        region=region,
    ).parsed


async def asyncio_detailed(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: ExecuteRequest,
    region: GCSRegion | Unset = UNSET,
) -> Response[ErrorResponse | ExecuteResponse | HTTPValidationError]:
    """Run an uploaded execution archive

     Fetches the archive uploaded under the execution name, installs its declared dependencies and runs
    its `main.py` inside the sandbox. The call returns once the run has started; follow it with
    `execution-status` or `execution-logs`.

    Args:
        local_sandbox_id (str):
        region (GCSRegion | Unset): Which storage bucket region signed URLs point at. Picking the
            region closest to the caller speeds up transfers; the sandbox reaches either region.
        body (ExecuteRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | ExecuteResponse | HTTPValidationError]
    """

    kwargs = _get_kwargs(
        local_sandbox_id=local_sandbox_id,
        body=body,
        region=region,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    local_sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: ExecuteRequest,
    region: GCSRegion | Unset = UNSET,
) -> ErrorResponse | ExecuteResponse | HTTPValidationError | None:
    """Run an uploaded execution archive

     Fetches the archive uploaded under the execution name, installs its declared dependencies and runs
    its `main.py` inside the sandbox. The call returns once the run has started; follow it with
    `execution-status` or `execution-logs`.

    Args:
        local_sandbox_id (str):
        region (GCSRegion | Unset): Which storage bucket region signed URLs point at. Picking the
            region closest to the caller speeds up transfers; the sandbox reaches either region.
        body (ExecuteRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | ExecuteResponse | HTTPValidationError
    """

    return (
        await asyncio_detailed(
            local_sandbox_id=local_sandbox_id,
            client=client,
            body=body,
            region=region,
        )
    ).parsed
