"""Jinja filter: say in one line why a Kubernetes client task failed.

A kubernetes.core task that cannot talk to an API server often ends with the
Python client's traceback in module_stderr, and its msg (when there is one)
holds the whole HTTP exchange. ``kao_client_error`` reads a failed task's
result and returns what a person needs: the HTTP status and the API server's
own message, or the connection error's cause, or the module's first line.
It never returns headers, bodies or tracebacks, which may hold tokens.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible.module_utils.common.text.converters import to_text

# "(401)" then "Reason: Unauthorized" in the client's ApiException text.
_STATUS = re.compile(r"\((\d{3})\)\s*\n?\s*Reason:\s*([^\n]+)")
# The Status object the API server answered with.
_BODY = re.compile(r"HTTP response body:\s*(\{.*\})", re.S)
# urllib3's and ssl's reasons for a failed connection.
_CAUSES = [
    re.compile(r"\[Errno -?\d+\] ([^'\")\]\n]+)"),
    re.compile(r"(certificate verify failed[^'\"(\n]*)", re.I),
    re.compile(r"(timed out)"),
    re.compile(r"(Connection refused|No route to host|Name or service not known|Temporary failure in name resolution)"),
]


def _status_message(body):
    try:
        status = json.loads(body)
    except ValueError:
        return ""
    if isinstance(status, dict):
        return to_text(status.get("message", ""))
    return ""


def kao_client_error(result, limit=300):
    """Return one line saying why a failed Kubernetes client task failed."""
    if not isinstance(result, dict):
        return "no reason given"
    text = "\n".join(to_text(result.get(k, "")) for k in ("msg", "module_stderr", "exception", "module_stdout"))
    status = _STATUS.search(text)
    if status:
        line = "HTTP %s %s" % (status.group(1), status.group(2).strip())
        body = _BODY.search(text)
        message = _status_message(body.group(1).split("\n")[0]) if body else ""
        if message:
            line += ": " + message
        return line[:limit]
    for cause in _CAUSES:
        found = cause.search(text)
        if found:
            return ("cannot connect: " + found.group(1).strip())[:limit]
    first = to_text(result.get("msg", "")).strip().split("\n")[0]
    if first and "Traceback" not in first and "MODULE FAILURE" not in first:
        return first[:limit]
    return "the client failed without saying why"


class FilterModule(object):
    def filters(self):
        return {"kao_client_error": kao_client_error}
