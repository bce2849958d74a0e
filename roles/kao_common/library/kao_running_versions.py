#!/usr/bin/python
"""Ansible module: the versions kao's services run on a host, read from the
running processes.

A binary on disk is not what runs: an upgrade replaces the file and then
restarts the service, and a step that stops in between leaves the new file
next to the old process. /proc/<MainPID>/exe is the image the process was
started from, even after the file was replaced (the kernel keeps the old
inode), so running it with its version flag reports what really serves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_running_versions
short_description: Report the version each of some systemd services runs
description:
  - Never changes anything. A unit systemd does not know is left out of the
    result; a known unit without a running main process reports an empty
    version.
options:
  services:
    description: >-
      The services to read: name (the component, the result's key), unit (the
      systemd unit) and style, how the binary tells its version (karmada: the
      version subcommand; kubernetes: --version, "Kubernetes vX.Y.Z"; etcd:
      --version, "etcd Version: X.Y.Z"). Several units may share a name
      (the estimators of the members): the name reports the oldest version
      they run, or an empty one when any of them does not run.
    type: list
    elements: dict
    required: true
author: kao
"""

RETURN = r"""
versions:
  description: Component name to the version its running process reports (vX.Y.Z), or "" when it does not run.
  type: dict
  returned: always
problems:
  description: Component name to why its version could not be read.
  type: dict
  returned: always
"""

import re
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

# What each style runs and how its answer names the version.
_STYLES = {
    "karmada": (["version"], re.compile(r'GitVersion:"(v[0-9]+\.[0-9]+\.[0-9]+)"')),
    "kubernetes": (["--version"], re.compile(r"^Kubernetes (v[0-9]+\.[0-9]+\.[0-9]+)\s*$", re.M)),
    "etcd": (["--version"], re.compile(r"^etcd Version: ([0-9]+\.[0-9]+\.[0-9]+)\s*$", re.M)),
}

_UNIT = re.compile(r"^[a-zA-Z0-9@._-]+\.service$")


def _unit_state(unit):
    """Return (load state, main PID) of a unit."""
    out = subprocess.run(
        ["systemctl", "show", "--property=LoadState,MainPID", "--", unit],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, timeout=30,
    ).stdout.decode("utf-8", "replace")
    props = dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)
    pid = props.get("MainPID", "0").strip()
    return props.get("LoadState", "").strip(), int(pid) if pid.isdigit() else 0


def _running_version(pid, style):
    args, pattern = _STYLES[style]
    res = subprocess.run(
        ["/proc/%d/exe" % pid] + args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
    )
    text = res.stdout.decode("utf-8", "replace")
    m = pattern.search(text)
    if not m:
        raise ValueError("its version flag answered %r" % text.strip()[:200])
    v = m.group(1)
    return v if v.startswith("v") else "v" + v


def main():
    module = AnsibleModule(
        argument_spec={"services": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    versions, problems = {}, {}
    for svc in module.params["services"]:
        name, unit, style = svc.get("name"), svc.get("unit"), svc.get("style")
        if not name or not isinstance(unit, str) or not _UNIT.match(unit) or style not in _STYLES:
            module.fail_json(msg="services: each entry needs a name, a unit NAME.service and a style "
                                 "(karmada, kubernetes or etcd), got %r" % (svc,))
        try:
            load, pid = _unit_state(unit)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            module.fail_json(msg="reading the state of %s: %s" % (unit, to_native(e)))
        if load != "loaded":
            continue
        version = ""
        if pid != 0:
            try:
                version = _running_version(pid, style)
            except (OSError, subprocess.SubprocessError, ValueError) as e:
                # The process may have exited between the two calls.
                problems[name] = to_native(e)
        versions[name] = _oldest(versions[name], version) if name in versions else version
    module.exit_json(changed=False, versions=versions, problems=problems)


def _oldest(a, b):
    """The older of two vX.Y.Z versions; empty when either is (a unit that does not run)."""
    if not a or not b:
        return ""
    key = lambda v: tuple(int(x) for x in v.lstrip("v").split("."))  # noqa: E731
    return a if key(a) <= key(b) else b


if __name__ == "__main__":
    main()
