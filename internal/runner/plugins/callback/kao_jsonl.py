# kao_jsonl: the ansible.posix.jsonl event stream, with the host each result
# was delegated to.
#
# kao reads a run's events from ansible.posix.jsonl (one JSON object per
# line). A result is filed under the host the task ran for, and Ansible
# strips the name of the host a task was delegated to from what callbacks
# get: from a loop's items entirely. kao's roles restart services one host
# at a time with a task that runs once and is delegated to each host in
# turn, so every one of those restarts would read as the first host's.
#
# This stdout callback writes the same stream and adds kao_delegated_to
# (the delegated host's inventory name, as the task's templated delegate_to
# says) to a delegated result, and to each item of a delegated loop. A
# loop's items reach callbacks one by one before the loop's result, each
# with its own templated task fields; the loop's result carries only the
# untemplated expression, so the names are kept per host and task until it
# comes. Nothing else of a result changes.

from ansible_collections.ansible.posix.plugins.callback.jsonl import CallbackModule as JSONLCallback

DOCUMENTATION = '''
    name: kao_jsonl
    type: stdout
    short_description: ansible.posix.jsonl's events with the delegated host of each result
    description:
      - Writes the events ansible.posix.jsonl writes; a delegated result, and
        each item of a delegated loop, also carries kao_delegated_to.
    options:
      show_custom_stats:
        description: Put what set_stats tasks recorded into the stats event.
        default: False
        env:
          - name: ANSIBLE_SHOW_CUSTOM_STATS
        ini:
          - key: show_custom_stats
            section: defaults
        type: bool
      json_indent:
        description: Spaces to indent each event's JSON by; 0 or less writes each event on one line.
        default: 0
        env:
          - name: ANSIBLE_JSON_INDENT
        ini:
          - key: json_indent
            section: defaults
        type: integer
'''


def _delegated_to(task_fields):
    """The templated delegate_to of a result's task, or None."""
    name = (task_fields or {}).get('delegate_to')
    if not isinstance(name, str) or not name or '{{' in name or '{%' in name:
        return None
    return name


class CallbackModule(JSONLCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'kao_jsonl'

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        # (host, task uuid) -> the delegated host of each loop item so far
        self._kao_items = {}

    def _kao_item(self, result):
        key = (result._host.get_name(), result._task._uuid)
        self._kao_items.setdefault(key, []).append(_delegated_to(result._task_fields))

    def v2_runner_item_on_ok(self, result):
        self._kao_item(result)

    def v2_runner_item_on_failed(self, result):
        self._kao_item(result)

    def v2_runner_item_on_skipped(self, result):
        self._kao_item(result)

    def _record_task_result(self, event_name, on_info, result, **kwargs):
        items = self._kao_items.pop((result._host.get_name(), result._task._uuid), None)
        res = result._result
        loop = res.get('results') if isinstance(res, dict) else None
        if isinstance(loop, list) and items is not None and len(items) == len(loop):
            for item, host in zip(loop, items):
                if host and isinstance(item, dict):
                    item['kao_delegated_to'] = host
        elif isinstance(res, dict):
            host = _delegated_to(result._task_fields)
            if host:
                res['kao_delegated_to'] = host
        return super(CallbackModule, self)._record_task_result(event_name, on_info, result, **kwargs)
