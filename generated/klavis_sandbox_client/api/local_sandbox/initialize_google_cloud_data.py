from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_response import ErrorResponse
from ...models.google_cloud_data_input import GoogleCloudDataInput
from ...models.http_validation_error import HTTPValidationError
from ...models.initialize_sandbox_response import InitializeSandboxResponse
from ...types import UNSET, Response, Unset


def _get_kwargs(
    sandbox_id: str,
    *,
    body: GoogleCloudDataInput | None | Unset = UNSET,
    init_default_data: bool | Unset = False,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    params: dict[str, Any] = {}

    params["init_default_data"] = init_default_data

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/local-sandbox/google_cloud/{sandbox_id}/initialize".format(
            sandbox_id=quote(str(sandbox_id), safe=""),
        ),
        "params": params,
    }

    if not isinstance(body, Unset):
        if isinstance(body, GoogleCloudDataInput):
            _kwargs["json"] = body.to_dict()
        else:
            _kwargs["json"] = body

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorResponse | HTTPValidationError | InitializeSandboxResponse | None:
    if response.status_code == 200:
        response_200 = InitializeSandboxResponse.from_dict(response.json())

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
) -> Response[ErrorResponse | HTTPValidationError | InitializeSandboxResponse]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: GoogleCloudDataInput | None | Unset = UNSET,
    init_default_data: bool | Unset = False,
) -> Response[ErrorResponse | HTTPValidationError | InitializeSandboxResponse]:
    """Load data into the sandbox's google_cloud server

     Seeds the `google_cloud` server of the sandbox with the given BigQuery, Cloud Storage, Cloud Logging
    and Compute Engine resources, or with the service's default test data.

    Args:
        sandbox_id (str):
        init_default_data (bool | Unset):  Default: False.
        body (GoogleCloudDataInput | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | HTTPValidationError | InitializeSandboxResponse]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        body=body,
        init_default_data=init_default_data,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: GoogleCloudDataInput | None | Unset = UNSET,
    init_default_data: bool | Unset = False,
) -> ErrorResponse | HTTPValidationError | InitializeSandboxResponse | None:
    """Load data into the sandbox's google_cloud server

     Seeds the `google_cloud` server of the sandbox with the given BigQuery, Cloud Storage, Cloud Logging
    and Compute Engine resources, or with the service's default test data.

    Args:
        sandbox_id (str):
        init_default_data (bool | Unset):  Default: False.
        body (GoogleCloudDataInput | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | HTTPValidationError | InitializeSandboxResponse
    """

    return sync_detailed(
        sandbox_id=sandbox_id,
        client=client,
        body=body,
        init_default_data=init_default_data,
    ).parsed


async def asyncio_detailed(
    sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: GoogleCloudDataInput | None | Unset = UNSET,
    init_default_data: bool | Unset = False,
) -> Response[ErrorResponse | HTTPValidationError | InitializeSandboxResponse]:
    """Load data into the sandbox's google_cloud server

     Seeds the `google_cloud` server of the sandbox with the given BigQuery, Cloud Storage, Cloud Logging
    and Compute Engine resources, or with the service's default test data.

    Args:
        sandbox_id (str):
        init_default_data (bool | Unset):  Default: False.
        body (GoogleCloudDataInput | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorResponse | HTTPValidationError | InitializeSandboxResponse]
    """

    kwargs = _get_kwargs(
        sandbox_id=sandbox_id,
        body=body,
        init_default_data=init_default_data,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    sandbox_id: str,
    *,
    client: AuthenticatedClient | Client,
    body: GoogleCloudDataInput | None | Unset = UNSET,
    init_default_data: bool | Unset = False,
) -> ErrorResponse | HTTPValidationError | InitializeSandboxResponse | None:
    """Load data into the sandbox's google_cloud server

     Seeds the `google_cloud` server of the sandbox with the given BigQuery, Cloud Storage, Cloud Logging
    and Compute Engine resources, or with the service's default test data.

    Args:
        sandbox_id (str):
        init_default_data (bool | Unset):  Default: False.
        body (GoogleCloudDataInput | None | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorResponse | HTTPValidationError | InitializeSandboxResponse
    """

    return (
        await asyncio_detailed(
            sandbox_id=sandbox_id,
            client=client,
            body=body,
            init_default_data=init_default_data,
        )
    ).parsed
