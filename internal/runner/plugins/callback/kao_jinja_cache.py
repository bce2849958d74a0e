# kao_jinja_cache: share Jinja's compiled templates between the processes of
# one ansible-playbook run.
#
# Ansible templates every task's arguments and variables in a worker process
# of its own, forked for that task and host, with a new Jinja environment
# each time. A role variable that many tasks read is parsed, turned into
# Python and compiled again in every one of them: in a kao install about half
# of the workers' time went to it. This plugin keeps each compiled template
# in a directory private to the run, keyed by everything Jinja's compiler
# reads, so a worker loads the code another process compiled instead of
# compiling it again. What a template renders is unchanged: the same code
# runs, only where it came from differs.
#
# kao writes this file into each run's directory and names its directory in
# the run's ansible.cfg; KAO_JINJA_CACHE_DIR names the cache directory, which
# kao creates (mode 0700) and removes when the run ends. The work is done
# when the module is imported, which Ansible does for every plugin of
# callback_plugins, enabled or not, in ansible-playbook's main process before
# any worker is forked: the workers inherit the patched compile. Without the
# variable the plugin does nothing.

import hashlib
import marshal
import os
import sys

import jinja2

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: kao_jinja_cache
    type: aggregate
    short_description: share compiled Jinja templates between the run's processes
    description:
      - Caches the code of compiled Jinja templates in the directory that
        KAO_JINJA_CACHE_DIR names, private to one run.
"""

# The environment's settings that change what the lexer, the parser or the
# code generator make of a source (jinja2.lexer.get_lexer, Environment.compile
# and jinja2.compiler read these).
_SETTINGS = (
    "block_start_string", "block_end_string",
    "variable_start_string", "variable_end_string",
    "comment_start_string", "comment_end_string",
    "line_statement_prefix", "line_comment_prefix",
    "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline",
    "optimized", "is_async", "sandboxed",
)

# Compiled code is valid only for the Python and the Jinja that made it.
_RUNTIME = "%s|%s|%s" % (sys.version, jinja2.__version__, marshal.version)


def _name(obj):
    """A stable name for a function or class the compiler looks at."""
    if obj is None:
        return "None"
    return "%s.%s" % (getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", type(obj).__qualname__))


def _key(env, source, name, filename, defer_init):
    """The cache key: the source and everything else compile() reads."""
    parts = [
        _RUNTIME,
        _name(type(env)),
        repr(name), repr(filename), repr(defer_init),
        repr(sorted(env.extensions)),
        # The code generator calls finalize and passes it the context, the
        # eval context or the environment as its decorator asks.
        _name(env.finalize),
        repr(getattr(env.finalize, "jinja_pass_arg", None)),
        repr(sorted(getattr(env, "intercepted_binops", ()))),
        repr(sorted(getattr(env, "intercepted_unops", ()))),
    ]
    parts += [repr(getattr(env, s, None)) for s in _SETTINGS]
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    h.update(b"\0")
    h.update(source.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def install(cache_dir):
    """Patch jinja2.Environment.compile to go through the cache in cache_dir."""
    original = jinja2.Environment.compile
    if getattr(original, "kao_jinja_cache", None) is not None:
        return

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        # raw asks for the generated Python source, and a parsed template
        # (a jinja2.nodes.Template) has no text to key on: compile those.
        if raw or not isinstance(source, str):
            return original(self, source, name, filename, raw, defer_init)
        path = os.path.join(cache_dir, _key(self, source, name, filename, defer_init))
        try:
            with open(path, "rb") as f:
                return marshal.loads(f.read())
        except (OSError, EOFError, ValueError, TypeError):
            pass
        # A source that does not compile raises here, as without the cache,
        # and is not cached.
        code = original(self, source, name, filename, raw, defer_init)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(code))
            os.replace(tmp, path)
        except OSError:
            # A full disk or a race with another worker costs a compile, never a result.
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return code

    compile.kao_jinja_cache = cache_dir
    jinja2.Environment.compile = compile


_CACHE_DIR = os.environ.get("KAO_JINJA_CACHE_DIR")
if _CACHE_DIR:
    if not os.path.isdir(_CACHE_DIR):
        # Ansible reports a plugin that fails to load, and the run goes on
        # without the cache.
        raise RuntimeError("KAO_JINJA_CACHE_DIR %s is not a directory" % _CACHE_DIR)
    install(_CACHE_DIR)


class CallbackModule(CallbackBase):
    """Its loading is its work: it receives no event."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kao_jinja_cache"
    CALLBACK_NEEDS_ENABLED = True
