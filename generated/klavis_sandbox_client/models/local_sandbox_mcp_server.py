from enum import Enum


class LocalSandboxMCPServer(str, Enum):
    ARXIV = "arxiv"
    CANVAS = "canvas"
    CODE_EXECUTOR = "code-executor"
    CODE_RUNNER = "code-runner"
    DESKTOP_COMMANDER = "desktop-commander"
    EXCEL = "excel"
    FILESYSTEM = "filesystem"
    GIT = "git"
    GOOGLE_CLOUD = "google_cloud"
    LOCALMEMORY = "localmemory"
    PDF_TOOLS = "pdf-tools"
    PLAYWRIGHT = "playwright"
    POSTE_EMAIL_TOOLATHLON = "poste_email_toolathlon"
    POWERPOINT = "powerpoint"
    TERMINAL = "terminal"
    WORD = "word"

    def __str__(self) -> str:
        return str(self.value)
