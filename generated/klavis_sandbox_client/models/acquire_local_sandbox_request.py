from __future__ import annotations

from collections.abc import Mapping
from typing import (
    Any,
    Literal,
    TypeVar,
    cast,
)

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.benchmark_enum import BenchmarkEnum
from ..models.local_sandbox_mcp_server import LocalSandboxMCPServer
from ..types import UNSET, Unset

T = TypeVar("T", bound="AcquireLocalSandboxRequest")


@_attrs_define
class AcquireLocalSandboxRequest:
    """
    Attributes:
        server_names (list[LocalSandboxMCPServer] | Literal['ALL']): The MCP servers to start (at least one), or the
            string `ALL` for every server a local sandbox can host.
        benchmark (BenchmarkEnum | None | Unset): Optional benchmark to prepare the sandbox for. It may change both the
            initial data and which implementation backs some servers (and therefore their tools).
        test_account_email (None | str | Unset): A particular test account to use.
        ttl_seconds (int | None | Unset): Seconds after which the service releases the sandbox by itself: at least 60,
            at most 86400, 7200 when omitted. `null` turns automatic release off. Default: 7200.
    """

    server_names: list[LocalSandboxMCPServer] | Literal["ALL"]
    benchmark: BenchmarkEnum | None | Unset = UNSET
    test_account_email: None | str | Unset = UNSET
    ttl_seconds: int | None | Unset = 7200
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        server_names: list[str] | Literal["ALL"]
        if isinstance(self.server_names, list):
            server_names = []
            for server_names_type_0_item_data in self.server_names:
                server_names_type_0_item = server_names_type_0_item_data.value
                server_names.append(server_names_type_0_item)

        else:
            server_names = self.server_names

        benchmark: None | str | Unset
        if isinstance(self.benchmark, Unset):
            benchmark = UNSET
        elif isinstance(self.benchmark, BenchmarkEnum):
            benchmark = self.benchmark.value
        else:
            benchmark = self.benchmark

        test_account_email: None | str | Unset
        if isinstance(self.test_account_email, Unset):
            test_account_email = UNSET
        else:
            test_account_email = self.test_account_email

        ttl_seconds: int | None | Unset
        if isinstance(self.ttl_seconds, Unset):
            ttl_seconds = UNSET
        else:
            ttl_seconds = self.ttl_seconds

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "server_names": server_names,
            }
        )
        if benchmark is not UNSET:
            field_dict["benchmark"] = benchmark
        if test_account_email is not UNSET:
            field_dict["test_account_email"] = test_account_email
        if ttl_seconds is not UNSET:
            field_dict["ttl_seconds"] = ttl_seconds

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_server_names(
            data: object,
        ) -> list[LocalSandboxMCPServer] | Literal["ALL"]:
            try:
                if not isinstance(data, list):
                    raise TypeError()
                server_names_type_0 = []
                _server_names_type_0 = data
                for server_names_type_0_item_data in _server_names_type_0:
                    server_names_type_0_item = LocalSandboxMCPServer(
                        server_names_type_0_item_data
                    )

                    server_names_type_0.append(server_names_type_0_item)

                return server_names_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            server_names_type_1 = cast(Literal["ALL"], data)
            if server_names_type_1 != "ALL":
                raise ValueError(
                    f"server_names_type_1 must match const 'ALL', got '{server_names_type_1}'"
                )
            return server_names_type_1

        server_names = _parse_server_names(d.pop("server_names"))

        def _parse_benchmark(data: object) -> BenchmarkEnum | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                benchmark_type_0 = BenchmarkEnum(data)

                return benchmark_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(BenchmarkEnum | None | Unset, data)

        benchmark = _parse_benchmark(d.pop("benchmark", UNSET))

        def _parse_test_account_email(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        test_account_email = _parse_test_account_email(
            d.pop("test_account_email", UNSET)
        )

        def _parse_ttl_seconds(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ttl_seconds = _parse_ttl_seconds(d.pop("ttl_seconds", UNSET))

        acquire_local_sandbox_request = cls(
            server_names=server_names,
            benchmark=benchmark,
            test_account_email=test_account_email,
            ttl_seconds=ttl_seconds,
        )

        acquire_local_sandbox_request.additional_properties = d
        return acquire_local_sandbox_request

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
