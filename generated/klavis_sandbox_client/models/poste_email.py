from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.poste_email_attachment import PosteEmailAttachment


T = TypeVar("T", bound="PosteEmail")


@_attrs_define
class PosteEmail:
    """One email message.

    Attributes:
        subject (str): Subject line.
        from_addr (str): Sender, such as `Name <user@example.com>`.
        to_addr (str): Recipient.
        email_id (None | str | Unset): Message id; the service assigns one when omitted.
        cc_addr (None | str | Unset): Carbon-copy recipients.
        bcc_addr (None | str | Unset): Blind carbon-copy recipients.
        date (None | str | Unset): Date in RFC 2822 form, such as `Wed, 10 Sep 2025 18:31:19 +0000`.
        message_id (None | str | Unset): Value of the Message-ID header.
        body_text (None | str | Unset): Body as plain text (or HTML).
        body_html (None | str | Unset): Body as HTML.
        is_read (bool | None | Unset): Whether the message has been read. Default: False.
        is_important (bool | None | Unset): Whether the message is flagged important. Default: False.
        folder (None | str | Unset): Folder holding the message, such as INBOX, Sent or Drafts. Default: 'INBOX'.
        attachments (list[PosteEmailAttachment] | None | Unset): Files attached to the message.
    """

    subject: str
    from_addr: str
    to_addr: str
    email_id: None | str | Unset = UNSET
    cc_addr: None | str | Unset = UNSET
    bcc_addr: None | str | Unset = UNSET
    date: None | str | Unset = UNSET
    message_id: None | str | Unset = UNSET
    body_text: None | str | Unset = UNSET
    body_html: None | str | Unset = UNSET
    is_read: bool | None | Unset = False
    is_important: bool | None | Unset = False
    folder: None | str | Unset = "INBOX"
    attachments: list[PosteEmailAttachment] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        subject = self.subject

        from_addr = self.from_addr

        to_addr = self.to_addr

        email_id: None | str | Unset
        if isinstance(self.email_id, Unset):
            email_id = UNSET
        else:
            email_id = self.email_id

        cc_addr: None | str | Unset
        if isinstance(self.cc_addr, Unset):
            cc_addr = UNSET
        else:
            cc_addr = self.cc_addr

        bcc_addr: None | str | Unset
        if isinstance(self.bcc_addr, Unset):
            bcc_addr = UNSET
        else:
            bcc_addr = self.bcc_addr

        date: None | str | Unset
        if isinstance(self.date, Unset):
            date = UNSET
        else:
            date = self.date

        message_id: None | str | Unset
        if isinstance(self.message_id, Unset):
            message_id = UNSET
        else:
            message_id = self.message_id

        body_text: None | str | Unset
        if isinstance(self.body_text, Unset):
            body_text = UNSET
        else:
            body_text = self.body_text

        body_html: None | str | Unset
        if isinstance(self.body_html, Unset):
            body_html = UNSET
        else:
            body_html = self.body_html

        is_read: bool | None | Unset
        if isinstance(self.is_read, Unset):
            is_read = UNSET
        else:
            is_read = self.is_read

        is_important: bool | None | Unset
        if isinstance(self.is_important, Unset):
            is_important = UNSET
        else:
            is_important = self.is_important

        folder: None | str | Unset
        if isinstance(self.folder, Unset):
            folder = UNSET
        else:
            folder = self.folder

        attachments: list[dict[str, Any]] | None | Unset
        if isinstance(self.attachments, Unset):
            attachments = UNSET
        elif isinstance(self.attachments, list):
            attachments = []
            for attachments_type_0_item_data in self.attachments:
                attachments_type_0_item = attachments_type_0_item_data.to_dict()
                attachments.append(attachments_type_0_item)

        else:
            attachments = self.attachments

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "subject": subject,
                "from_addr": from_addr,
                "to_addr": to_addr,
            }
        )
        if email_id is not UNSET:
            field_dict["email_id"] = email_id
        if cc_addr is not UNSET:
            field_dict["cc_addr"] = cc_addr
        if bcc_addr is not UNSET:
            field_dict["bcc_addr"] = bcc_addr
        if date is not UNSET:
            field_dict["date"] = date
        if message_id is not UNSET:
            field_dict["message_id"] = message_id
        if body_text is not UNSET:
            field_dict["body_text"] = body_text
        if body_html is not UNSET:
            field_dict["body_html"] = body_html
        if is_read is not UNSET:
            field_dict["is_read"] = is_read
        if is_important is not UNSET:
            field_dict["is_important"] = is_important
        if folder is not UNSET:
            field_dict["folder"] = folder
        if attachments is not UNSET:
            field_dict["attachments"] = attachments

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.poste_email_attachment import PosteEmailAttachment  # noqa: PLC0415

        d = dict(src_dict)
        subject = d.pop("subject")

        from_addr = d.pop("from_addr")

        to_addr = d.pop("to_addr")

        def _parse_email_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        email_id = _parse_email_id(d.pop("email_id", UNSET))

        def _parse_cc_addr(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cc_addr = _parse_cc_addr(d.pop("cc_addr", UNSET))

        def _parse_bcc_addr(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        bcc_addr = _parse_bcc_addr(d.pop("bcc_addr", UNSET))

        def _parse_date(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        date = _parse_date(d.pop("date", UNSET))

        def _parse_message_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        message_id = _parse_message_id(d.pop("message_id", UNSET))

        def _parse_body_text(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        body_text = _parse_body_text(d.pop("body_text", UNSET))

        def _parse_body_html(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        body_html = _parse_body_html(d.pop("body_html", UNSET))

        def _parse_is_read(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        is_read = _parse_is_read(d.pop("is_read", UNSET))

        def _parse_is_important(data: object) -> bool | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(bool | None | Unset, data)

        is_important = _parse_is_important(d.pop("is_important", UNSET))

        def _parse_folder(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        folder = _parse_folder(d.pop("folder", UNSET))

        def _parse_attachments(
            data: object,
        ) -> list[PosteEmailAttachment] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                attachments_type_0 = []
                _attachments_type_0 = data
                for attachments_type_0_item_data in _attachments_type_0:
                    attachments_type_0_item = PosteEmailAttachment.from_dict(
                        attachments_type_0_item_data
                    )

                    attachments_type_0.append(attachments_type_0_item)

                return attachments_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[PosteEmailAttachment] | None | Unset, data)

        attachments = _parse_attachments(d.pop("attachments", UNSET))

        poste_email = cls(
            subject=subject,
            from_addr=from_addr,
            to_addr=to_addr,
            email_id=email_id,
            cc_addr=cc_addr,
            bcc_addr=bcc_addr,
            date=date,
            message_id=message_id,
            body_text=body_text,
            body_html=body_html,
            is_read=is_read,
            is_important=is_important,
            folder=folder,
            attachments=attachments,
        )

        poste_email.additional_properties = d
        return poste_email

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
