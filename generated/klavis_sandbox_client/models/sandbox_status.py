from enum import Enum


class SandboxStatus(str, Enum):
    ERROR = "error"
    IDLE = "idle"
    OCCUPIED = "occupied"

    def __str__(self) -> str:
        return str(self.value)
