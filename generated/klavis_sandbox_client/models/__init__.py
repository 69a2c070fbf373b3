"""Contains all the data models used in inputs/outputs"""

from .acquire_local_sandbox_request import AcquireLocalSandboxRequest
from .acquire_local_sandbox_response import AcquireLocalSandboxResponse
from .benchmark_enum import BenchmarkEnum
from .big_query_dataset import BigQueryDataset
from .big_query_field_input import BigQueryFieldInput
from .big_query_field_output import BigQueryFieldOutput
from .big_query_table_input import BigQueryTableInput
from .big_query_table_output import BigQueryTableOutput
from .canvas_assignment import CanvasAssignment
from .canvas_course import CanvasCourse
from .canvas_course_announcements_type_0_item import CanvasCourseAnnouncementsType0Item
from .canvas_data_input import CanvasDataInput
from .canvas_data_output import CanvasDataOutput
from .canvas_dump_response import CanvasDumpResponse
from .canvas_enrollment import CanvasEnrollment
from .canvas_quiz import CanvasQuiz
from .canvas_quiz_question import CanvasQuizQuestion
from .canvas_quiz_question_answers_type_0_item import CanvasQuizQuestionAnswersType0Item
from .compute_instance import ComputeInstance
from .compute_instance_labels_type_0 import ComputeInstanceLabelsType0
from .dump_url_response import DumpUrlResponse
from .error_response import ErrorResponse
from .execute_request import ExecuteRequest
from .execute_response import ExecuteResponse
from .execution_logs_response import ExecutionLogsResponse
from .execution_status_response import ExecutionStatusResponse
from .execution_upload_url_request import ExecutionUploadUrlRequest
from .execution_upload_url_response import ExecutionUploadUrlResponse
from .export_artifacts_request import ExportArtifactsRequest
from .export_artifacts_response import ExportArtifactsResponse
from .gcs_region import GCSRegion
from .google_cloud_data_input import GoogleCloudDataInput
from .google_cloud_data_output import GoogleCloudDataOutput
from .google_cloud_dump_response import GoogleCloudDumpResponse
from .http_validation_error import HTTPValidationError
from .initialize_sandbox_response import InitializeSandboxResponse
from .lifecycle_rule import LifecycleRule
from .list_local_sandboxes_response import ListLocalSandboxesResponse
from .local_sandbox_info import LocalSandboxInfo
from .local_sandbox_mcp_server import LocalSandboxMCPServer
from .local_sandbox_server_item import LocalSandboxServerItem
from .local_sandbox_server_item_auth_data_type_0 import (
    LocalSandboxServerItemAuthDataType0,
)
from .local_sandbox_server_item_metadata_type_0 import (
    LocalSandboxServerItemMetadataType0,
)
from .log_bucket import LogBucket
from .log_entry import LogEntry
from .log_entry_json_data_type_0 import LogEntryJsonDataType0
from .log_entry_resource_labels_type_0 import LogEntryResourceLabelsType0
from .log_sink import LogSink
from .message_response import MessageResponse
from .poste_email import PosteEmail
from .poste_email_attachment import PosteEmailAttachment
from .poste_email_data_input import PosteEmailDataInput
from .poste_email_data_input_users import PosteEmailDataInputUsers
from .poste_email_data_output import PosteEmailDataOutput
from .poste_email_dump_response import PosteEmailDumpResponse
from .poste_email_user_data import PosteEmailUserData
from .sandbox_mcp_server import SandboxMCPServer
from .sandbox_status import SandboxStatus
from .storage_bucket import StorageBucket
from .storage_object import StorageObject
from .upload_url_response import UploadUrlResponse
from .validation_error import ValidationError
from .validation_error_ctx import ValidationErrorCtx

__all__ = (
    "AcquireLocalSandboxRequest",
    "AcquireLocalSandboxResponse",
    "BenchmarkEnum",
    "BigQueryDataset",
    "BigQueryFieldInput",
    "BigQueryFieldOutput",
    "BigQueryTableInput",
    "BigQueryTableOutput",
    "CanvasAssignment",
    "CanvasCourse",
    "CanvasCourseAnnouncementsType0Item",
    "CanvasDataInput",
    "CanvasDataOutput",
    "CanvasDumpResponse",
    "CanvasEnrollment",
    "CanvasQuiz",
    "CanvasQuizQuestion",
    "CanvasQuizQuestionAnswersType0Item",
    "ComputeInstance",
    "ComputeInstanceLabelsType0",
    "DumpUrlResponse",
    "ErrorResponse",
    "ExecuteRequest",
    "ExecuteResponse",
    "ExecutionLogsResponse",
    "ExecutionStatusResponse",
    "ExecutionUploadUrlRequest",
    "ExecutionUploadUrlResponse",
    "ExportArtifactsRequest",
    "ExportArtifactsResponse",
    "GCSRegion",
    "GoogleCloudDataInput",
    "GoogleCloudDataOutput",
    "GoogleCloudDumpResponse",
    "HTTPValidationError",
    "InitializeSandboxResponse",
    "LifecycleRule",
    "ListLocalSandboxesResponse",
    "LocalSandboxInfo",
    "LocalSandboxMCPServer",
    "LocalSandboxServerItem",
    "LocalSandboxServerItemAuthDataType0",
    "LocalSandboxServerItemMetadataType0",
    "LogBucket",
    "LogEntry",
    "LogEntryJsonDataType0",
    "LogEntryResourceLabelsType0",
    "LogSink",
    "MessageResponse",
    "PosteEmail",
    "PosteEmailAttachment",
    "PosteEmailDataInput",
    "PosteEmailDataInputUsers",
    "PosteEmailDataOutput",
    "PosteEmailDumpResponse",
    "PosteEmailUserData",
    "SandboxMCPServer",
    "SandboxStatus",
    "StorageBucket",
    "StorageObject",
    "UploadUrlResponse",
    "ValidationError",
    "ValidationErrorCtx",
)
