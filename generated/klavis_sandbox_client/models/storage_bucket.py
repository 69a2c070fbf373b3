from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.lifecycle_rule import LifecycleRule


T = TypeVar("T", bound="StorageBucket")


@_attrs_define
class StorageBucket:
    """A Cloud Storage bucket.

    Attributes:
        name (str): Bucket name.
        location (str | Unset): Where the bucket lives. Default: 'US'.
        storage_class (str | Unset): Storage class of the bucket. Default: 'STANDARD'.
        versioning_enabled (bool | Unset): Whether object versioning is on. Default: False.
        lifecycle_rules (list[LifecycleRule] | None | Unset): Lifecycle rules of the bucket.
        created_at (None | str | Unset): Creation time.
        updated_at (None | str | Unset): Time of the last change.
    """

    name: str
    location: str | Unset = "US"
    storage_class: str | Unset = "STANDARD"
    versioning_enabled: bool | Unset = False
    lifecycle_rules: list[LifecycleRule] | None | Unset = UNSET
    created_at: None | str | Unset = UNSET
    updated_at: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        location = self.location

        storage_class = self.storage_class

        versioning_enabled = self.versioning_enabled

        lifecycle_rules: list[dict[str, Any]] | None | Unset
        if isinstance(self.lifecycle_rules, Unset):
            lifecycle_rules = UNSET
        elif isinstance(self.lifecycle_rules, list):
            lifecycle_rules = []
            for lifecycle_rules_type_0_item_data in self.lifecycle_rules:
                lifecycle_rules_type_0_item = lifecycle_rules_type_0_item_data.to_dict()
                lifecycle_rules.append(lifecycle_rules_type_0_item)

        else:
            lifecycle_rules = self.lifecycle_rules

        created_at: None | str | Unset
        if isinstance(self.created_at, Unset):
            created_at = UNSET
        else:
            created_at = self.created_at

        updated_at: None | str | Unset
        if isinstance(self.updated_at, Unset):
            updated_at = UNSET
        else:
            updated_at = self.updated_at

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
            }
        )
        if location is not UNSET:
            field_dict["location"] = location
        if storage_class is not UNSET:
            field_dict["storage_class"] = storage_class
        if versioning_enabled is not UNSET:
            field_dict["versioning_enabled"] = versioning_enabled
        if lifecycle_rules is not UNSET:
            field_dict["lifecycle_rules"] = lifecycle_rules
        if created_at is not UNSET:
            field_dict["created_at"] = created_at
        if updated_at is not UNSET:
            field_dict["updated_at"] = updated_at

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.lifecycle_rule import LifecycleRule  # noqa: PLC0415

        d = dict(src_dict)
        name = d.pop("name")

        location = d.pop("location", UNSET)

        storage_class = d.pop("storage_class", UNSET)

        versioning_enabled = d.pop("versioning_enabled", UNSET)

        def _parse_lifecycle_rules(data: object) -> list[LifecycleRule] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                lifecycle_rules_type_0 = []
                _lifecycle_rules_type_0 = data
                for lifecycle_rules_type_0_item_data in _lifecycle_rules_type_0:
                    lifecycle_rules_type_0_item = LifecycleRule.from_dict(
                        lifecycle_rules_type_0_item_data
                    )

                    lifecycle_rules_type_0.append(lifecycle_rules_type_0_item)

                return lifecycle_rules_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[LifecycleRule] | None | Unset, data)

        lifecycle_rules = _parse_lifecycle_rules(d.pop("lifecycle_rules", UNSET))

        def _parse_created_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        created_at = _parse_created_at(d.pop("created_at", UNSET))

        def _parse_updated_at(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        updated_at = _parse_updated_at(d.pop("updated_at", UNSET))

        storage_bucket = cls(
            name=name,
            location=location,
            storage_class=storage_class,
            versioning_enabled=versioning_enabled,
            lifecycle_rules=lifecycle_rules,
            created_at=created_at,
            updated_at=updated_at,
        )

        storage_bucket.additional_properties = d
        return storage_bucket

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
