from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.log_entry_json_data_type_0 import LogEntryJsonDataType0
    from ..models.log_entry_resource_labels_type_0 import LogEntryResourceLabelsType0


T = TypeVar("T", bound="LogEntry")


@_attrs_define
class LogEntry:
    """A Cloud Logging entry.

    Attributes:
        log_name (str): Name of the log the entry belongs to.
        message (None | str | Unset): Text payload.
        json_data (LogEntryJsonDataType0 | None | Unset): Structured (JSON) payload.
        severity (str | Unset): DEBUG, INFO, WARNING, ERROR or CRITICAL. Default: 'INFO'.
        timestamp (None | str | Unset): When the entry was written.
        resource_type (None | str | Unset): Kind of resource that wrote the entry, such as `gce_instance`.
        resource_labels (LogEntryResourceLabelsType0 | None | Unset): Labels of that resource.
    """

    log_name: str
    message: None | str | Unset = UNSET
    json_data: LogEntryJsonDataType0 | None | Unset = UNSET
    severity: str | Unset = "INFO"
    timestamp: None | str | Unset = UNSET
    resource_type: None | str | Unset = UNSET
    resource_labels: LogEntryResourceLabelsType0 | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.log_entry_json_data_type_0 import LogEntryJsonDataType0  # noqa: PLC0415
        from ..models.log_entry_resource_labels_type_0 import (
            LogEntryResourceLabelsType0,  # noqa: PLC0415
        )

        log_name = self.log_name

        message: None | str | Unset
        if isinstance(self.message, Unset):
            message = UNSET
        else:
            message = self.message

        json_data: dict[str, Any] | None | Unset
        if isinstance(self.json_data, Unset):
            json_data = UNSET
        elif isinstance(self.json_data, LogEntryJsonDataType0):
            json_data = self.json_data.to_dict()
        else:
            json_data = self.json_data

        severity = self.severity

        timestamp: None | str | Unset
        if isinstance(self.timestamp, Unset):
            timestamp = UNSET
        else:
            timestamp = self.timestamp

        resource_type: None | str | Unset
        if isinstance(self.resource_type, Unset):
            resource_type = UNSET
        else:
            resource_type = self.resource_type

        resource_labels: dict[str, Any] | None | Unset
        if isinstance(self.resource_labels, Unset):
            resource_labels = UNSET
        elif isinstance(self.resource_labels, LogEntryResourceLabelsType0):
            resource_labels = self.resource_labels.to_dict()
        else:
            resource_labels = self.resource_labels

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "log_name": log_name,
            }
        )
        if message is not UNSET:
            field_dict["message"] = message
        if json_data is not UNSET:
            field_dict["json_data"] = json_data
        if severity is not UNSET:
            field_dict["severity"] = severity
        if timestamp is not UNSET:
            field_dict["timestamp"] = timestamp
        if resource_type is not UNSET:
            field_dict["resource_type"] = resource_type
        if resource_labels is not UNSET:
            field_dict["resource_labels"] = resource_labels

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.log_entry_json_data_type_0 import LogEntryJsonDataType0  # noqa: PLC0415
        from ..models.log_entry_resource_labels_type_0 import (
            LogEntryResourceLabelsType0,  # noqa: PLC0415
        )

        d = dict(src_dict)
        log_name = d.pop("log_name")

        def _parse_message(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        message = _parse_message(d.pop("message", UNSET))

        def _parse_json_data(data: object) -> LogEntryJsonDataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                json_data_type_0 = LogEntryJsonDataType0.from_dict(data)

                return json_data_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LogEntryJsonDataType0 | None | Unset, data)

        json_data = _parse_json_data(d.pop("json_data", UNSET))

        severity = d.pop("severity", UNSET)

        def _parse_timestamp(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        timestamp = _parse_timestamp(d.pop("timestamp", UNSET))

        def _parse_resource_type(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        resource_type = _parse_resource_type(d.pop("resource_type", UNSET))

        def _parse_resource_labels(
            data: object,
        ) -> LogEntryResourceLabelsType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                resource_labels_type_0 = LogEntryResourceLabelsType0.from_dict(data)

                return resource_labels_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LogEntryResourceLabelsType0 | None | Unset, data)

        resource_labels = _parse_resource_labels(d.pop("resource_labels", UNSET))

        log_entry = cls(
            log_name=log_name,
            message=message,
            json_data=json_data,
            severity=severity,
            timestamp=timestamp,
            resource_type=resource_type,
            resource_labels=resource_labels,
        )

        log_entry.additional_properties = d
        return log_entry

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
