"""Data documents of the servers that have them: google_cloud, poste_email_toolathlon, canvas.

The request models follow the contract's ``*-Input`` schemas field by field. They are strict
(no ``"1"`` for ``1``, no ``"true"`` for ``true``, no NaN or infinities) so a document of the
wrong shape answers 422 with one message per offending field. Properties the contract does
not name are refused too (``extra_forbidden``): the contract does not forbid them, but a
misspelt key (``bucket`` for ``buckets``) silently ignored would hide a bug, and the
emulator errs on the side of telling. Free-form objects (``json_data``, announcements,
answers) take any keys. The stored document is the validated one, with the contract's
defaults filled in, and ``dump`` answers it in the same shape.
"""

from __future__ import annotations

import email.utils
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._mail import MAX_ATTACHMENT_BYTES, document_problem, folder_problem, is_plain_address

__all__ = [
    "DATA_MODELS",
    "DATA_SERVERS",
    "CanvasData",
    "GoogleCloudData",
    "PosteEmailData",
    "default_document",
    "document_for",
    "empty_document",
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


# ---------------------------------------------------------------------- google_cloud


class BigQueryDataset(_Strict):
    """A BigQuery dataset."""

    id: str
    description: str | None = None
    location: str = "US"
    created_at: str | None = None
    updated_at: str | None = None


class BigQueryField(_Strict):
    """One column of a BigQuery table schema."""

    name: str
    type: str
    mode: str | None = "NULLABLE"
    description: str | None = None
    fields: list[BigQueryField] | None = None


class BigQueryTable(_Strict):
    """A BigQuery table."""

    dataset_id: str
    id: str
    description: str | None = None
    fields: list[BigQueryField] | None = None
    row_count: str | None = None
    created_at: str | None = None


class LifecycleRule(_Strict):
    """A lifecycle rule of a Cloud Storage bucket."""

    action: str
    action_storage_class: str | None = None
    age_days: int | None = None
    created_before: str | None = None
    is_live: bool | None = None
    num_newer_versions: int | None = None


class StorageBucket(_Strict):
    """A Cloud Storage bucket."""

    name: str
    location: str = "US"
    storage_class: str = "STANDARD"
    versioning_enabled: bool = False
    lifecycle_rules: list[LifecycleRule] | None = None
    created_at: str | None = None
    updated_at: str | None = None


class StorageObject(_Strict):
    """An object in a Cloud Storage bucket."""

    bucket: str
    name: str
    content_type: str | None = None
    size: str | None = None
    content: str | None = None
    md5_hash: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class LogEntry(_Strict):
    """A Cloud Logging entry."""

    log_name: str
    message: str | None = None
    json_data: dict[str, Any] | None = None
    severity: str = "INFO"
    timestamp: str | None = None
    resource_type: str | None = None
    resource_labels: dict[str, str] | None = None


class LogSink(_Strict):
    """A Cloud Logging sink."""

    name: str
    filter: str | None = None
    description: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class LogBucket(_Strict):
    """A Cloud Logging bucket."""

    name: str
    location: str = "global"
    retention_days: int = 30
    description: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class ComputeInstance(_Strict):
    """A Compute Engine virtual machine."""

    name: str
    zone: str
    machine_type: str = "e2-micro"
    status: str = "RUNNING"
    description: str | None = None
    labels: dict[str, str] | None = None
    created_at: str | None = None


class GoogleCloudData(_Strict):
    """Body of ``POST /local-sandbox/google_cloud/{sandbox_id}/initialize``."""

    datasets: list[BigQueryDataset] | None = None
    tables: list[BigQueryTable] | None = None
    buckets: list[StorageBucket] | None = None
    objects: list[StorageObject] | None = None
    log_entries: list[LogEntry] | None = None
    log_sinks: list[LogSink] | None = None
    log_buckets: list[LogBucket] | None = None
    instances: list[ComputeInstance] | None = None


# ---------------------------------------------------------------------- poste_email_toolathlon


def _one_line(value: str | None) -> str | None:
    if value is not None and ("\r" in value or "\n" in value or "\0" in value):
        raise ValueError("a header value must not contain line breaks or NUL characters")
    return value


class PosteEmailAttachment(_Strict):
    """A file attached to an email (on the mail server: ``size`` zero bytes)."""

    filename: str
    content_type: str | None = None
    size: int | None = Field(default=None, ge=0, le=MAX_ATTACHMENT_BYTES)

    _headers = field_validator("filename", "content_type")(_one_line)

    @field_validator("content_type")
    @classmethod
    def _mime_type(cls, value: str | None) -> str | None:
        if value is not None and value.count("/") != 1:
            raise ValueError(f"content_type {value!r} is not a MIME type such as text/plain")
        return value


class PosteEmail(_Strict):
    """One email message."""

    email_id: str | None = None
    subject: str
    from_addr: str
    to_addr: str
    cc_addr: str | None = None
    bcc_addr: str | None = None
    date: str | None = None
    message_id: str | None = None
    body_text: str | None = None
    body_html: str | None = None
    is_read: bool | None = False
    is_important: bool | None = False
    folder: str | None = "INBOX"
    attachments: list[PosteEmailAttachment] | None = None

    _headers = field_validator(
        "subject", "from_addr", "to_addr", "cc_addr", "bcc_addr", "date", "message_id"
    )(_one_line)

    @field_validator("folder")
    @classmethod
    def _mailbox_name(cls, value: str | None) -> str | None:
        problem = None if value is None else folder_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("date")
    @classmethod
    def _rfc2822(cls, value: str | None) -> str | None:
        if value:
            try:
                email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"date {value!r} is not an RFC 2822 date such as "
                    "'Wed, 10 Sep 2025 18:31:19 +0000'"
                ) from None
        return value


class PosteEmailUserData(_Strict):
    """The messages of one user."""

    emails: list[PosteEmail] | None = None


class PosteEmailData(_Strict):
    """Body of ``POST /local-sandbox/poste_email_toolathlon/{sandbox_id}/initialize``."""

    users: dict[str, PosteEmailUserData] = Field(default_factory=dict)

    @field_validator("users")
    @classmethod
    def _addresses(cls, value: dict[str, PosteEmailUserData]) -> dict[str, PosteEmailUserData]:
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

    @model_validator(mode="after")
    def _within_the_mail_servers_limits(self) -> PosteEmailData:
        """Each message fits the mail server's message size, all of them a sandbox's mail
        (see :mod:`klavis_emulator._mail.server`): checked here, so that initialize answers 422
        and a benchmark pack is refused when the emulator starts."""
        problem = document_problem(self.model_dump(mode="json"))
        if problem is not None:
            raise ValueError(problem)
        return self


# ---------------------------------------------------------------------- canvas


class CanvasAssignment(_Strict):
    """An assignment of a course."""

    name: str
    description: str | None = None
    points_possible: float | None = None
    due_at: str | None = None
    submission_types: list[str] = Field(default_factory=list)
    published: bool = True


class CanvasQuizQuestion(_Strict):
    """One quiz question."""

    question_name: str | None = None
    question_text: str
    question_type: str = "multiple_choice_question"
    points_possible: float = 1.0
    answers: list[dict[str, Any]] | None = None


class CanvasQuiz(_Strict):
    """A quiz of a course."""

    title: str
    description: str | None = None
    quiz_type: str = "assignment"
    time_limit: int | None = None
    published: bool = True
    due_at: str | None = None
    questions: list[CanvasQuizQuestion] = Field(default_factory=list)


class CanvasEnrollment(_Strict):
    """Enrolls an existing user in a course."""

    user_email: str
    role: str = "StudentEnrollment"


class CanvasCourse(_Strict):
    """A course with its assignments, quizzes, enrollments and announcements."""

    name: str
    course_code: str
    published: bool = True
    assignments: list[CanvasAssignment] = Field(default_factory=list)
    quizzes: list[CanvasQuiz] = Field(default_factory=list)
    enrollments: list[CanvasEnrollment] = Field(default_factory=list)
    announcements: list[dict[str, Any]] | None = None


class CanvasData(_Strict):
    """Body of ``POST /local-sandbox/canvas/{sandbox_id}/initialize``."""

    courses: list[CanvasCourse] = Field(default_factory=list)


DATA_MODELS: Final[dict[str, type[_Strict]]] = {
    "google_cloud": GoogleCloudData,
    "poste_email_toolathlon": PosteEmailData,
    "canvas": CanvasData,
}
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
        return _normalized(server_name, {key: [] for key in GoogleCloudData.model_fields})
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
