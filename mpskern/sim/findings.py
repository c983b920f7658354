"""A strict check's finding: "file:line: message", as compilers report."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    message: str

    def __str__(self):
        return f"{self.file}:{self.line}: {self.message}"
