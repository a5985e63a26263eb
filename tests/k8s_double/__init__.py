"""TEST DOUBLE of the Kubernetes REST API (loopback HTTP), for gputopo's tests and drills.

Start it in-process with :class:`KubeApiDouble` (``.start()``, ``.url``) or as a separate
process with :func:`double_process` (``python -m k8s_double``, which prints ``{"port": N}``
on its first line); point the official client at it with :func:`api_client`.
"""

from k8s_double.client import api_client, configuration
from k8s_double.process import DoubleProcess, double_process
from k8s_double.server import RESOURCES, ApiError, KubeApiDouble, Resource, running_double

__all__ = ["RESOURCES", "ApiError", "DoubleProcess", "KubeApiDouble", "Resource",
           "api_client", "configuration", "double_process", "running_double"]
