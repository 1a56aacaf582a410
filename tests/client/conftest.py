"""The client's tests import it from client/ in this checkout (CI installs the platform, not the
client): a fresh clone tests the client it holds."""

import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "client"
if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))
