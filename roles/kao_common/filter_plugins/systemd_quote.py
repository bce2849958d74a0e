"""Jinja filters for kao's systemd units: quote one command-line argument
(systemd_quote), and read the output of `systemctl show` (systemd_show).

Values from a KarmadaDeployment (extra args) reach ExecStart= lines. systemd
parses those lines itself: it expands %-specifiers on the whole line, splits
words on whitespace honouring quotes and C escapes, then substitutes $VAR and
${VAR} in each word. ``systemd_quote`` turns any string into exactly one word
that systemd hands to the program unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    # systemd expands specifiers before it splits words, and environment
    # variables after: both are doubled to stay literal.
    "%": "%%",
    "$": "$$",
}


def systemd_quote(value):
    """Return value as one double-quoted systemd ExecStart= argument."""
    text = to_text(value, errors="surrogate_or_strict")
    out = ['"']
    for ch in text:
        if ch == "\x00":
            raise AnsibleFilterError("systemd_quote: an argument cannot contain a NUL character")
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def systemd_show(text):
    """Parse `systemctl show --property=Id,... UNIT...` into {unit: {property: value}}.

    systemctl prints one block of Property=value lines per unit, blocks
    separated by an empty line; a block without Id is skipped. Unit names
    keep their suffix (karmada-etcd.service).
    """
    units = {}
    block = {}
    for line in to_text(text, errors="surrogate_or_strict").splitlines() + [""]:
        if line == "":
            if "Id" in block:
                units[block["Id"]] = block
            block = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            block[key] = value
    return units


class FilterModule(object):
    """kao's systemd filters."""

    def filters(self):
        return {"systemd_quote": systemd_quote, "systemd_show": systemd_show}
