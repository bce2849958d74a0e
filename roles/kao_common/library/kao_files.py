#!/usr/bin/python
"""Ansible module: converge many small files and directories in one call.

kao's roles put dozens of PEM files, kubeconfigs and systemd units on every
host. Copying them one loop item at a time costs a round trip to the host per
file even when nothing changed, and that dominated a no-op run. This module
takes every file of a role at once, with its full content, and writes only
those whose content, mode or owner differ.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kao_files
short_description: Converge a set of directories and small files in one call
description:
  - Creates the directories, then writes each file whose content, mode, owner or group differs from
    the request, atomically (a temporary file in the same directory, then a rename).
  - Every new content is staged and verified before any file is replaced, so a refused unit leaves all
    the files of the call as they were.
  - Unchanged files are not touched, so a second run reports no change.
  - Supports check mode, and diff mode: each changed file's entry names its path; the content of a
    file that only its owner may read (a key, a kubeconfig) is never shown, nor that of a large one.
options:
  directories:
    description: Directories to create or fix, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {type: path, required: true, description: Absolute path.}
      mode: {type: str, default: "0755", description: Octal mode.}
      owner: {type: str, default: root, description: Owning user.}
      group: {type: str, default: root, description: Owning group.}
      tags: {type: list, elements: str, default: [], description: Reported in changed_tags when this directory changes.}
  files:
    description: Files to converge.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {type: path, required: true, description: Absolute path; its directory must exist.}
      content: {type: str, required: true, no_log: true, description: The whole content (UTF-8). Never logged.}
      mode: {type: str, default: "0644", description: Octal mode.}
      owner: {type: str, default: root, description: Owning user.}
      group: {type: str, default: root, description: Owning group.}
      verify:
        type: str
        default: none
        choices: [none, systemd-unit]
        description: Check new content before it replaces the file; systemd-unit runs systemd-analyze verify.
      tags:
        type: list
        elements: str
        default: []
        description: Reported in changed_tags when this file changes (for example the services to restart).
author: kao
"""

RETURN = r"""
changed_paths:
  description: Paths created or modified, in request order.
  type: list
  returned: always
changed_tags:
  description: Sorted tags of the changed directories and files.
  type: list
  returned: always
diff:
  description: >-
    In diff mode, one entry per changed path, its headers the path: the content before and after for a
    text file others may read, else the mode and owner before and after.
  type: list
  returned: when diff mode is on
"""

import atexit
import difflib
import grp
import os
import pwd
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native


def _ids(module, owner, group, path):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        module.fail_json(msg="%s: no user %s on this host" % (path, owner))
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        module.fail_json(msg="%s: no group %s on this host" % (path, group))
    return uid, gid


def _mode(module, value, path):
    try:
        mode = int(value, 8)
    except (TypeError, ValueError):
        mode = -1
    if mode < 0 or mode > 0o7777:
        module.fail_json(msg="%s: mode %r is not an octal file mode" % (path, value))
    return mode


def _converge_dir(module, spec):
    path = spec["path"]
    if not os.path.isabs(path):
        module.fail_json(msg="%s: directories need an absolute path" % path)
    mode = _mode(module, spec["mode"], path)
    uid, gid = _ids(module, spec["owner"], spec["group"], path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not module.check_mode:
            os.makedirs(path, mode)
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(st.st_mode):
        module.fail_json(msg="%s exists and is not a directory" % path)
    if stat.S_IMODE(st.st_mode) == mode and st.st_uid == uid and st.st_gid == gid:
        return False
    if not module.check_mode:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return True


# Contents larger than this are not shown in a diff.
_MAX_DIFF_BYTES = 64 * 1024


def _attributes(st):
    """The mode and owner of a file or directory, as a diff shows them."""
    if st is None:
        return {"state": "absent"}
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"mode": "%04o" % stat.S_IMODE(st.st_mode), "owner": owner, "group": group}


def _lstat(path):
    """The file's status, None when it does not exist."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _diff_entry(spec, mode, st, want, same_content):
    """The diff entry of a changed file: its content when others may read it
    (never a key's, which only its owner may read) and it is small text, else
    its attributes. same_content says whether only its mode or owner differ."""
    path = spec["path"]
    entry = {"before_header": path, "after_header": path}
    shown = mode & 0o044 and len(want) <= _MAX_DIFF_BYTES
    before = b""
    if shown and st is not None:
        if st.st_size > _MAX_DIFF_BYTES or stat.S_IMODE(st.st_mode) & 0o044 == 0:
            shown = False
        else:
            with open(path, "rb") as f:
                before = f.read()
    if shown:
        try:
            # The module prepares the diff itself: the content argument is
            # no_log (it may be a key), and Ansible masks its value wherever
            # it appears whole in the result; the lines of a diff do not.
            lines = difflib.unified_diff(before.decode("utf-8").splitlines(True), want.decode("utf-8").splitlines(True), n=1)
            entry["prepared"] = "".join(line for line in lines if not line.startswith(("---", "+++"))).rstrip("\n")
            return entry
        except UnicodeDecodeError:
            pass
    entry["before"] = _attributes(st)
    entry["after"] = {"mode": "%04o" % mode, "owner": spec["owner"], "group": spec["group"]}
    if st is not None:
        entry["before"]["content"] = "same" if same_content else "differs"
        entry["after"]["content"] = "as requested"
    return entry


def _verify_unit(module, path, tmp):
    # systemd-analyze only reads files named like units: check a copy under
    # the unit's own name.
    scratch = tempfile.mkdtemp(prefix="kao-verify-")
    try:
        unit = os.path.join(scratch, os.path.basename(path))
        shutil.copyfile(tmp, unit)
        rc, out, err = module.run_command(["systemd-analyze", "verify", unit])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if rc != 0:
        _cleanup()
        detail = (err or out).strip().replace(scratch, os.path.dirname(path))
        module.fail_json(msg="%s: systemd-analyze verify refused the new unit: %s" % (path, detail))


def _stage_file(module, spec):
    """Decide what a file needs, and stage new content in a temporary file.

    Returns None when the file is as requested, ("fix", path) when only its
    mode or owner differ, or ("write", tmp) with the new content staged (and
    verified) next to it.
    """
    path = spec["path"]
    if not os.path.isabs(path):
        module.fail_json(msg="%s: files need an absolute path" % path)
    want = to_bytes(spec["content"], errors="surrogate_or_strict")
    mode = _mode(module, spec["mode"], path)
    uid, gid = _ids(module, spec["owner"], spec["group"], path)
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        module.fail_json(msg="%s exists and is not a regular file" % path)

    same_content = False
    if st is not None and st.st_size == len(want):
        with open(path, "rb") as f:
            same_content = f.read() == want
    if same_content:
        if stat.S_IMODE(st.st_mode) == mode and st.st_uid == uid and st.st_gid == gid:
            return None
        return ("fix", None)
    if module.check_mode:
        return ("write", None)

    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        module.fail_json(msg="%s: directory %s does not exist" % (path, directory))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kao-")
    _staged.append(tmp)
    # Restrict before writing: the content may be a private key.
    os.fchmod(fd, 0o600)
    os.fchown(fd, uid, gid)
    with os.fdopen(fd, "wb") as f:
        f.write(want)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    if spec["verify"] == "systemd-unit":
        _verify_unit(module, path, tmp)
    return ("write", tmp)


# Temporary files staged by this call; whatever was not renamed into place
# is removed when the module exits, failed or not.
_staged = []


def _cleanup():
    for tmp in _staged:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    path=dict(type="path", required=True),
                    mode=dict(type="str", default="0755"),
                    owner=dict(type="str", default="root"),
                    group=dict(type="str", default="root"),
                    tags=dict(type="list", elements="str", default=[]),
                ),
            ),
            files=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    path=dict(type="path", required=True),
                    content=dict(type="str", required=True, no_log=True),
                    mode=dict(type="str", default="0644"),
                    owner=dict(type="str", default="root"),
                    group=dict(type="str", default="root"),
                    verify=dict(type="str", default="none", choices=["none", "systemd-unit"]),
                    tags=dict(type="list", elements="str", default=[]),
                ),
            ),
        ),
        supports_check_mode=True,
    )

    atexit.register(_cleanup)
    seen = set()
    for spec in module.params["files"]:
        if spec["path"] in seen:
            module.fail_json(msg="%s is listed twice" % spec["path"])
        seen.add(spec["path"])

    changed_paths = []
    diffs = []
    tags = set()
    try:
        for spec in module.params["directories"]:
            before = _lstat(spec["path"]) if module._diff else None
            if _converge_dir(module, spec):
                changed_paths.append(spec["path"])
                tags.update(spec["tags"])
                if module._diff:
                    diffs.append({"before_header": spec["path"], "after_header": spec["path"],
                                  "before": _attributes(before),
                                  "after": {"mode": spec["mode"], "owner": spec["owner"], "group": spec["group"]}})
        # Stage and verify every new content before replacing any file: a
        # refused unit leaves all of them as they were, so that nothing
        # changes on the host without the handlers that go with it.
        plans = [(spec, _stage_file(module, spec)) for spec in module.params["files"]]
        for spec, plan in plans:
            if plan is None:
                continue
            if module._diff:
                want = to_bytes(spec["content"], errors="surrogate_or_strict")
                diffs.append(_diff_entry(spec, _mode(module, spec["mode"], spec["path"]), _lstat(spec["path"]), want, plan[0] == "fix"))
            if not module.check_mode:
                if plan[0] == "write":
                    os.rename(plan[1], spec["path"])
                else:
                    uid, gid = _ids(module, spec["owner"], spec["group"], spec["path"])
                    os.chown(spec["path"], uid, gid)
                    os.chmod(spec["path"], _mode(module, spec["mode"], spec["path"]))
            changed_paths.append(spec["path"])
            tags.update(spec["tags"])
    except OSError as e:
        _cleanup()
        # The error names a path and an errno, never file content.
        module.fail_json(msg="writing files failed: %s" % to_native(e), changed_paths=changed_paths)

    result = dict(changed=bool(changed_paths), changed_paths=changed_paths, changed_tags=sorted(tags))
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
