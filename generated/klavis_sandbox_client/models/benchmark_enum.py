from enum import Enum


class BenchmarkEnum(str, Enum):
    MCP_ATLAS = "MCP_Atlas"
    MCP_MARK = "MCP_Mark"
    TOOLATHLON = "Toolathlon"

    def __str__(self) -> str:
        return str(self.value)
