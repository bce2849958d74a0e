"""Jinja filter for version-aware command lines: kao_version_flags.

A role renders the flags it sets for a component once, for every version;
``kao_version_flags`` then drops those the component's version does not
accept, according to kao's flag table (files/flags.yml in this role): for
each component, the flags whose support depends on the version, with the
first version that accepts them (since) and the first that no longer does
(until). A flag the table does not name is accepted by every version.

Flags of a user's extra args do not pass through this filter: they stay the
user's choice, as written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

_TABLE_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "files", "flags.yml")
_VERSION = re.compile(r"^v([0-9]+)\.([0-9]+)\.([0-9]+)$")
_table = None


def _parse(version, what):
    m = _VERSION.match(to_text(version))
    if not m:
        raise AnsibleFilterError("kao_version_flags: %s %r is not a version vX.Y.Z" % (what, version))
    return tuple(int(p) for p in m.groups())


def _load():
    global _table
    if _table is None:
        with open(_TABLE_PATH) as f:
            _table = yaml.safe_load(f) or {}
    return _table


def _flag_name(flag):
    text = to_text(flag)
    if not text.startswith("--"):
        raise AnsibleFilterError("kao_version_flags: %r is not a --flag" % text)
    return text[2:].split("=", 1)[0]


def supported(entry, version):
    """Whether a table entry ({since, until}) covers version (a tuple)."""
    since, until = entry.get("since"), entry.get("until")
    if since and version < _parse(since, "since"):
        return False
    if until and version >= _parse(until, "until"):
        return False
    return True


def kao_version_flags(flags, component, version):
    """Return flags without those that version of component does not accept."""
    v = _parse(version, "version")
    known = (_load().get(to_text(component)) or {}).get("flags") or {}
    return [f for f in flags if _flag_name(f) not in known or supported(known[_flag_name(f)], v)]


class FilterModule(object):
    """kao's version-aware flag filter."""

    def filters(self):
        return {"kao_version_flags": kao_version_flags}
