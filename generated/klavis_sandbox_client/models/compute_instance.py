from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.compute_instance_labels_type_0 import ComputeInstanceLabelsType0


T = TypeVar("T", bound="ComputeInstance")


@_attrs_define
class ComputeInstance:
    """A Compute Engine virtual machine.

    Attributes:
        name (str): Instance name.
        zone (str): Zone the instance runs in.
        machine_type (str | Unset): Machine type. Default: 'e2-micro'.
        status (str | Unset): Instance state. Default: 'RUNNING'.
        description (None | str | Unset): What the instance is for.
        labels (ComputeInstanceLabelsType0 | None | Unset): Labels of the instance.
        created_at (None | str | Unset): Creation time.
    """

    name: str
    zone: str
    machine_type: str | Unset = "e2-micro"
    status: str | Unset = "RUNNING"
    description: None | str | Unset = UNSET
    labels: ComputeInstanceLabelsType0 | None | Unset = UNSET
    created_at: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.compute_instance_labels_type_0 import ComputeInstanceLabelsType0  # noqa: PLC0415

        name = self.name

        zone = self.zone

        machine_type = self.machine_type

        status = self.status

        description: None | str | Unset
        if isinstance(self.description, Unset):
            description = UNSET
        else:
            description = self.description

        labels: dict[str, Any] | None | Unset
        if isinstance(self.labels, Unset):
            labels = UNSET
        elif isinstance(self.labels, ComputeInstanceLabelsType0):
            labels = self.labels.to_dict()
        else:
            labels = self.labels

        created_at: None | str | Unset
        if isinstance(self.created_at, Unset):
            created_at = UNSET
        else:
            created_at = self.created_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "zone": zone,
            }
        )
        if machine_type is not UNSET:
            field_dict["machine_type"] = machine_type
        if status is not UNSET:
            field_dict["status"] = status
        if description is not UNSET:
            field_dict["description"] = description
        if labels is not UNSET:
            field_dict["labels"] = labels
        if created_at is not UNSET:
            field_dict["created_at"] = created_at

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.compute_instance_labels_type_0 import ComputeInstanceLabelsType0  # noqa: PLC0415

        d = dict(src_dict)
        name = d.pop("name")

        zone = d.pop("zone")

        machine_type = d.pop("machine_type", UNSET)

        status = d.pop("status", UNSET)

        def _parse_description(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        description = _parse_description(d.pop("description", UNSET))

        def _parse_labels(data: object) -> ComputeInstanceLabelsType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                labels_type_0 = ComputeInstanceLabelsType0.from_dict(data)

                return labels_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ComputeInstanceLabelsType0 | None | Unset, data)

        labels = _parse_labels(d.pop("labels", UNSET))

        def _parse_created_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        created_at = _parse_created_at(d.pop("created_at", UNSET))

        compute_instance = cls(
            name=name,
            zone=zone,
            machine_type=machine_type,
            status=status,
            description=description,
            labels=labels,
            created_at=created_at,
        )

        compute_instance.additional_properties = d
        return compute_instance

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
