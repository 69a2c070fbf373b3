from enum import Enum


class GCSRegion(str, Enum):
    ASIA = "asia"
    US = "us"

    def __str__(self) -> str:
        return str(self.value)
