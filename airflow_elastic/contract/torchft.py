"""torchft's own environment, as fault-tolerant replica-group pods get it (standard library only).

The names are torchft's (``torchft/manager.py``, its examples' ``train_ddp.py``), so a trainer written from
torchft's documentation runs unchanged; the renderer writes them, ``airflow_elastic.runtime`` reads them.
"""

from __future__ import annotations

LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"  #: the lighthouse's address, ``http://<host>:<port>``
MANAGER_PORT = "TORCHFT_MANAGER_PORT"  #: the port of the replica group's manager server (on its pod 0)
QUORUM_RETRIES = "TORCHFT_QUORUM_RETRIES"  #: how often a manager retries a failed quorum (a lighthouse restart)
REPLICA_GROUP_ID = "REPLICA_GROUP_ID"  #: 0-based index of this pod's replica group
NUM_REPLICA_GROUPS = "NUM_REPLICA_GROUPS"  #: replica groups in the group
#: The lighthouse pod's own port (its ``--bind``), so that a local cluster can move it like the address's.
LIGHTHOUSE_PORT = "TORCHFT_LIGHTHOUSE_PORT"

#: Names a fault-tolerant group's user env may not set (the renderer owns them there).
RESERVED = frozenset({LIGHTHOUSE, MANAGER_PORT, QUORUM_RETRIES, REPLICA_GROUP_ID, NUM_REPLICA_GROUPS, LIGHTHOUSE_PORT})
