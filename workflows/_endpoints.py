"""The generated operations `workflows` uses, named once, with what is safe to retry.

Retry policy: reads, release, reset, signed-URL requests, initialize (extracting the same
archive twice gives the same workspace) and dumps are safe to send again after an ambiguous
failure. Acquire never is: it is reconciled instead (see :mod:`workflows._reconcile`).
"""

from __future__ import annotations

from types import ModuleType

from klavis_sandbox_client.api.local_sandbox import (
    acquire_local_sandbox,
    dump_canvas_data,
    dump_google_cloud_data,
    dump_poste_email_data,
    dump_workspace,
    execute_script,
    export_artifacts,
    get_execution_logs,
    get_execution_status,
    get_execution_upload_url,
    get_local_sandbox,
    get_upload_url,
    initialize_canvas_data,
    initialize_google_cloud_data,
    initialize_poste_email_data,
    initialize_workspace,
    list_local_sandboxes,
    release_local_sandbox,
    reset_local_sandbox,
)

__all__ = ["OPERATIONS"]

OPERATIONS: dict[str, ModuleType] = {
    module.__name__.rsplit(".", 1)[1]: module
    for module in (
        acquire_local_sandbox,
        dump_canvas_data,
        dump_google_cloud_data,
        dump_poste_email_data,
        dump_workspace,
        execute_script,
        export_artifacts,
        get_execution_logs,
        get_execution_status,
        get_execution_upload_url,
        get_local_sandbox,
        get_upload_url,
        initialize_canvas_data,
        initialize_google_cloud_data,
        initialize_poste_email_data,
        initialize_workspace,
        list_local_sandboxes,
        release_local_sandbox,
        reset_local_sandbox,
    )
}
"""The generated modules by name, for the flows' :class:`~workflows._flows.Call` steps."""
