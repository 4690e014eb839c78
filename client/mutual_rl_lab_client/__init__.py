"""Read a Mutual RL Lab from Python: ``Lab(url, token)``, then ``lab.runs(...)``,
``lab.history(...)``, ``lab.events(...)``, ``lab.comparison(...)``.

Imports the standard library only (no Django, no torch); pandas, when installed, makes
the DataFrames.
"""

from mutual_rl_lab_client.errors import (
    BadRequest,
    Forbidden,
    LabError,
    LabUnreachable,
    NotFound,
    OriginRefused,
    ServerError,
    Unauthorized,
)
from mutual_rl_lab_client.lab import Lab

__all__ = [
    "BadRequest",
    "Forbidden",
    "Lab",
    "LabError",
    "LabUnreachable",
    "NotFound",
    "OriginRefused",
    "ServerError",
    "Unauthorized",
]
__version__ = "0.1.0"
