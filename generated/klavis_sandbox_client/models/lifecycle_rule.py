from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="LifecycleRule")


@_attrs_define
class LifecycleRule:
    """A lifecycle rule of a Cloud Storage bucket.

    Attributes:
        action (str): What the rule does, `Delete` or `SetStorageClass`.
        action_storage_class (None | str | Unset): Storage class to move objects to, for `SetStorageClass`.
        age_days (int | None | Unset): Object age in days that triggers the rule.
        created_before (None | str | Unset): Only objects created before this date match.
        is_live (bool | None | Unset): Whether the rule only applies to live object versions.
        num_newer_versions (int | None | Unset): How many newer versions must exist for the rule to match.
    """

    action: str
    action_storage_class: None | str | Unset = UNSET
    age_days: int | None | Unset = UNSET
    created_before: None | str | Unset = UNSET
    is_live: bool | None | Unset = UNSET
    num_newer_versions: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        action = self.action

        action_storage_class: None | str | Unset
        if isinstance(self.action_storage_class, Unset):
            action_storage_class = UNSET
        else:
            action_storage_class = self.action_storage_class

        age_days: int | None | Unset
        if isinstance(self.age_days, Unset):
            age_days = UNSET
        else:
            age_days = self.age_days

        created_before: None | str | Unset
        if isinstance(self.created_before, Unset):
            created_before = UNSET
        else:
            created_before = self.created_before

        is_live: bool | None | Unset
        if isinstance(self.is_live, Unset):
            is_live = UNSET
        else:
            is_live = self.is_live

        num_newer_versions: int | None | Unset
        if isinstance(self.num_newer_versions, Unset):
            num_newer_versions = UNSET
        else:
            num_newer_versions = self.num_newer_versions

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "action": action,
            }
        )
        if action_storage_class is not UNSET:
            field_dict["action_storage_class"] = action_storage_class
        if age_days is not UNSET:
            field_dict["age_days"] = age_days
        if created_before is not UNSET:
            field_dict["created_before"] = created_before
        if is_live is not UNSET:
            field_dict["is_live"] = is_live
        if num_newer_versions is not UNSET:
            field_dict["num_newer_versions"] = num_newer_versions

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        action = d.pop("action")

        def _parse_action_storage_class(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        action_storage_class = _parse_action_storage_class(
            d.pop("action_storage_class", UNSET)
        )

        def _parse_age_days(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        age_days = _parse_age_days(d.pop("age_days", UNSET))

        def _parse_created_before(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        created_before = _parse_created_before(d.pop("created_before", UNSET))

        def _parse_is_live(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        is_live = _parse_is_live(d.pop("is_live", UNSET))

        def _parse_num_newer_versions(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        num_newer_versions = _parse_num_newer_versions(
            d.pop("num_newer_versions", UNSET)
        )

        lifecycle_rule = cls(
            action=action,
            action_storage_class=action_storage_class,
            age_days=age_days,
            created_before=created_before,
            is_live=is_live,
            num_newer_versions=num_newer_versions,
        )

        lifecycle_rule.additional_properties = d
        return lifecycle_rule

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
