from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.poste_email_data_input_users import PosteEmailDataInputUsers


T = TypeVar("T", bound="PosteEmailDataInput")


@_attrs_define
class PosteEmailDataInput:
    """Mailboxes to load into a sandbox's poste_email_toolathlon server, one entry per user.

    Attributes:
        users (PosteEmailDataInputUsers | Unset): Each user's mail, keyed by the user's email address.
    """

    users: PosteEmailDataInputUsers | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        users: dict[str, Any] | Unset = UNSET
        if not isinstance(self.users, Unset):
            users = self.users.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if users is not UNSET:
            field_dict["users"] = users

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.poste_email_data_input_users import PosteEmailDataInputUsers  # noqa: PLC0415

        d = dict(src_dict)
        _users = d.pop("users", UNSET)
        users: PosteEmailDataInputUsers | Unset
        if isinstance(_users, Unset):
            users = UNSET
        else:
            users = PosteEmailDataInputUsers.from_dict(_users)

        poste_email_data_input = cls(
            users=users,
        )

        poste_email_data_input.additional_properties = d
        return poste_email_data_input

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
