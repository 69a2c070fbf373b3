"""Data documents of the servers that have them: google_cloud, poste_email_toolathlon, canvas.

The request models are the contract's ``*-Input`` schemas, built from it when this module is
imported (:mod:`klavis_emulator._contract_models`), so they follow it field by field. They are
strict (no ``"1"`` for ``1``, no ``"true"`` for ``true``, no NaN or infinities) so a document of
the wrong shape answers 422 with one message per offending field. Properties the contract does
not name are refused too (``extra_forbidden``): the contract does not forbid them, but a
misspelt key (``bucket`` for ``buckets``) silently ignored would hide a bug, and the
emulator errs on the side of telling. Free-form objects (``json_data``, announcements,
answers) take any keys. The mail schemas' models have the emulator's own validators too
(header values on one line, RFC 2822 dates, mailbox names, user addresses, the mail server's
sizes). The stored document is the validated one, with the contract's defaults filled in, and
``dump`` answers it in the same shape.
"""

from __future__ import annotations

import email.utils
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._contract import contract_schemas
from ._contract_models import build_models
from ._mail import MAX_ATTACHMENT_BYTES, document_problem, folder_problem, is_plain_address

__all__ = [
    "DATA_MODELS",
    "DATA_SERVERS",
    "default_document",
    "document_for",
    "empty_document",
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


# ---------------------------------------------------------------------- the emulator's checks
# Validators of the mail schemas' models, what the contract cannot say: a message the mail
# server would refuse answers 422 at initialize. (Given to the models as validators rather
# than as base classes: each base would be one more pydantic model to build at import, 0.3 to
# 1 ms each on this machine.)


def _one_line(value: str | None) -> str | None:
    if value is not None and ("\r" in value or "\n" in value or "\0" in value):
        raise ValueError("a header value must not contain line breaks or NUL characters")
    return value


def _mime_type(value: str | None) -> str | None:
    if value is not None and value.count("/") != 1:
        raise ValueError(f"content_type {value!r} is not a MIME type such as text/plain")
    return value


def _mailbox_name(value: str | None) -> str | None:
    problem = None if value is None else folder_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _rfc2822(value: str | None) -> str | None:
    if value:
        try:
            email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"date {value!r} is not an RFC 2822 date such as 'Wed, 10 Sep 2025 18:31:19 +0000'"
            ) from None
    return value


def _addresses(value: dict[str, Any]) -> dict[str, Any]:
    seen: set[str] = set()
    for address in value:
        if not is_plain_address(address):
            raise ValueError(
                f"user {address[:80]!r} is not an email address such as name@example.com "
                "(each user is an account of the mail server)"
            )
        if address.lower() in seen:
            raise ValueError(f"user {address!r} is named twice (addresses ignore case)")
        seen.add(address.lower())
    return value


def _within_the_mail_servers_limits(document: BaseModel) -> BaseModel:
    """Each message fits the mail server's message size, all of them a sandbox's mail
    (see :mod:`klavis_emulator._mail.server`): checked here, so that initialize answers 422
    and a benchmark pack is refused when the emulator starts."""
    problem = document_problem(document.model_dump(mode="json"))
    if problem is not None:
        raise ValueError(problem)
    return document


_HEADERS: Final = ("subject", "from_addr", "to_addr", "cc_addr", "bcc_addr", "date", "message_id")
_CHECKS: Final[dict[str, dict[str, Any]]] = {
    "PosteEmailAttachment-Input": {
        "_headers": field_validator("filename", "content_type")(_one_line),
        "_mime_type": field_validator("content_type")(_mime_type),
    },
    "PosteEmail-Input": {
        "_headers": field_validator(*_HEADERS)(_one_line),
        "_mailbox_name": field_validator("folder")(_mailbox_name),
        "_rfc2822": field_validator("date")(_rfc2822),
    },
    "PosteEmailData-Input": {
        "_addresses": field_validator("users")(_addresses),
        "_limits": model_validator(mode="after")(_within_the_mail_servers_limits),
    },
}
_NARROWED: Final = {("PosteEmailAttachment-Input", "size"): Field(ge=0, le=MAX_ATTACHMENT_BYTES)}


# ---------------------------------------------------------------------- the models

_ROOTS: Final = {
    "google_cloud": "GoogleCloudData-Input",
    "poste_email_toolathlon": "PosteEmailData-Input",
    "canvas": "CanvasData-Input",
}


def _models() -> dict[str, type[BaseModel]]:
    built = build_models(
        contract_schemas(),
        _ROOTS.values(),
        base=_Strict,
        validators=_CHECKS,
        narrowed=_NARROWED,
    )
    return {server: built[schema] for server, schema in _ROOTS.items()}


DATA_MODELS: Final[dict[str, type[BaseModel]]] = _models()
"""The model of each server's document (the body of its ``initialize``), by server name."""
DATA_SERVERS: Final[tuple[str, ...]] = tuple(DATA_MODELS)

# ---------------------------------------------------------------------- documents

_DEFAULTS: Final[dict[str, dict[str, Any]]] = {
    "google_cloud": {
        "datasets": [
            {"id": "sales", "description": "Demo sales data", "location": "US"},
        ],
        "tables": [
            {
                "dataset_id": "sales",
                "id": "orders",
                "description": "One row per order",
                "fields": [
                    {"name": "order_id", "type": "STRING", "mode": "REQUIRED"},
                    {"name": "amount", "type": "FLOAT"},
                    {"name": "created", "type": "TIMESTAMP"},
                ],
                "row_count": "3",
            }
        ],
        "buckets": [{"name": "demo-bucket", "location": "US"}],
        "objects": [
            {
                "bucket": "demo-bucket",
                "name": "reports/readme.txt",
                "content_type": "text/plain",
                "content": "Demo object of the emulator's default google_cloud data.",
            }
        ],
        "log_entries": [
            {"log_name": "app", "message": "service started", "severity": "INFO"},
        ],
        "log_sinks": [],
        "log_buckets": [{"name": "_Default", "retention_days": 30}],
        "instances": [{"name": "demo-vm", "zone": "us-central1-a"}],
    },
    "poste_email_toolathlon": {
        "users": {
            "alice@example.com": {
                "emails": [
                    {
                        "subject": "Welcome",
                        "from_addr": "Bob <bob@example.com>",
                        "to_addr": "alice@example.com",
                        "date": "Wed, 10 Sep 2025 18:31:19 +0000",
                        "body_text": "Welcome to the team!",
                    }
                ]
            },
            "bob@example.com": {"emails": []},
        }
    },
    "canvas": {
        "courses": [
            {
                "name": "Introduction to Programming",
                "course_code": "CS101",
                "assignments": [
                    {
                        "name": "Hello, world",
                        "points_possible": 10,
                        "submission_types": ["online_text_entry"],
                    }
                ],
                "quizzes": [
                    {
                        "title": "Warm-up",
                        "questions": [
                            {
                                "question_text": "Is Python dynamically typed?",
                                "question_type": "true_false_question",
                                "answers": [
                                    {"answer_text": "True", "answer_weight": 100},
                                    {"answer_text": "False", "answer_weight": 0},
                                ],
                            }
                        ],
                    }
                ],
                "enrollments": [{"user_email": "student1@example.com"}],
                "announcements": [{"title": "Welcome", "message": "<p>Hello class!</p>"}],
            }
        ]
    },
}


def _normalized(server_name: str, document: dict[str, Any]) -> dict[str, Any]:
    model = DATA_MODELS[server_name]
    data: dict[str, Any] = model.model_validate(document).model_dump(mode="json")
    return data


def empty_document(server_name: str) -> dict[str, Any]:
    """What a server holds before any data was loaded (empty lists, no users)."""
    if server_name == "google_cloud":
        return _normalized(server_name, {key: [] for key in DATA_MODELS[server_name].model_fields})
    return _normalized(server_name, {})


def default_document(server_name: str) -> dict[str, Any]:
    """The small built-in document ``init_default_data=true`` loads."""
    return _normalized(server_name, _DEFAULTS[server_name])


def document_for(server_name: str, body: BaseModel | None, *, default: bool) -> dict[str, Any]:
    """The document to store for an ``initialize`` call.

    No body: the default document (``default``) or an empty one. A body: the body, after
    the default document's items when ``default`` is set (lists are concatenated, mail
    users merged).
    """
    base = default_document(server_name) if default else empty_document(server_name)
    if body is None:
        return base
    given: dict[str, Any] = body.model_dump(mode="json")
    if not default:
        return given
    merged = dict(base)
    for key, value in given.items():
        old = merged.get(key)
        if isinstance(old, list) and isinstance(value, list):
            merged[key] = old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            merged[key] = {**old, **value}
        elif value is not None:
            merged[key] = value
    return merged
