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
# compiling it again.
#
# Compiled code is the same wherever it was compiled, with two exceptions
# that the plugin guards against:
# - Jinja folds a filter or a test applied to constants into the code, by
#   calling it while compiling: `{{ 1000000 | random }}` compiles to one
#   number. A template whose compilation called a filter or a test is never
#   cached, so each process still draws its own.
# - Whether a filter or a test gets the context, the eval context or the
#   environment is decided when compiling, from the filters and tests the
#   environment has. The cache keeps, with the code, every filter and test
#   the compiler looked up and how it is called, and uses the code only where
#   each is looked up the same way.
#
# kao writes this file into each run's directory and names its directory in
# the run's ansible.cfg; KAO_JINJA_CACHE_DIR names the cache directory, which
# kao creates (mode 0700, its own) and removes when the run ends. The work is
# done when the module is imported, which Ansible does for every plugin of
# callback_plugins, enabled or not, in ansible-playbook's main process before
# any worker is forked: the workers inherit the patched compile. Without the
# variable, or with a directory that is not the user's own and private, the
# plugin does nothing (with a warning in the second case).

import functools
import hashlib
import marshal
import os
import stat
import sys

import jinja2

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

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
    "optimized", "is_async", "sandboxed", "newstyle_gettext",
)

# Compiled code is valid only for the Python and the Jinja that made it.
_RUNTIME = "%s|%s|%s" % (sys.version, jinja2.__version__, marshal.version)


def _name(obj):
    """A stable name for a function or class the compiler looks at."""
    if obj is None:
        return "None"
    return "%s.%s" % (getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", type(obj).__qualname__))


def _key(env, source, name, filename, defer_init):
    """The cache key: the source and every setting compile() reads."""
    autoescape = env.autoescape
    parts = [
        _RUNTIME,
        _name(type(env)),
        repr(name), repr(filename), repr(defer_init),
        repr(sorted((k, _name(type(v))) for k, v in env.extensions.items())),
        _name(autoescape) if callable(autoescape) else repr(autoescape),
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


def _how(func):
    """How a filter or test is called, as the compiler sees it."""
    if func is None:
        return "missing"
    return repr(getattr(func, "jinja_pass_arg", None))


class _Watched(object):
    """The filters or tests of an environment while it compiles: records
    what the compiler looks up, and whether it called any of them."""

    def __init__(self, mapping, kind, watch):
        self._mapping = mapping
        self._kind = kind
        self._watch = watch

    def get(self, name, default=None):
        func = self._mapping.get(name, default)
        self._watch.lookups.append((self._kind, name, _how(func)))
        if not callable(func):
            return func

        @functools.wraps(func)
        def called(*args, **kwargs):
            self._watch.called = True
            return func(*args, **kwargs)

        return called

    def __getitem__(self, name):
        func = self.get(name)
        if func is None:
            raise KeyError(name)
        return func

    def __contains__(self, name):
        return self.get(name) is not None

    def __getattr__(self, attr):
        return getattr(self._mapping, attr)


class _Watch(object):
    def __init__(self):
        self.lookups = []
        self.called = False


def _same_lookups(env, lookups):
    """Whether env looks up each filter and test as the compiler did."""
    for kind, name, how in lookups:
        mapping = env.filters if kind == "filter" else env.tests
        if _how(mapping.get(name)) != how:
            return False
    return True


def _load(path):
    """The cached (code, lookups) at path, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            code, lookups = marshal.loads(f.read())
        return code, lookups
    except (OSError, EOFError, ValueError, TypeError):
        return None


def _store(path, code, lookups):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(marshal.dumps((code, tuple(lookups))))
        os.replace(tmp, path)
    except OSError:
        # A full disk or a race with another worker costs a compile, never a result.
        try:
            os.unlink(tmp)
        except OSError:
            pass


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
        cached = _load(path)
        if cached is not None and _same_lookups(self, cached[1]):
            return cached[0]
        watch = _Watch()
        filters, tests = self.filters, self.tests
        self.filters = _Watched(filters, "filter", watch)
        self.tests = _Watched(tests, "test", watch)
        try:
            # A source that does not compile raises here, as without the
            # cache, and is not cached.
            code = original(self, source, name, filename, raw, defer_init)
        finally:
            self.filters, self.tests = filters, tests
        if not watch.called:
            _store(path, code, watch.lookups)
        return code

    compile.kao_jinja_cache = cache_dir
    jinja2.Environment.compile = compile


def _private(path):
    """Why path may not hold code to load, or None if it may: it must be a
    directory of this user's that no one else can read or write."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return str(e)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return "not private to this user (owner %d, mode %o)" % (st.st_uid, stat.S_IMODE(st.st_mode))
    return None


_CACHE_DIR = os.environ.get("KAO_JINJA_CACHE_DIR")
if _CACHE_DIR:
    _why = _private(_CACHE_DIR)
    if _why is None:
        install(_CACHE_DIR)
    else:
        Display().warning("kao_jinja_cache: not caching compiled templates in %s: %s" % (_CACHE_DIR, _why))


class CallbackModule(CallbackBase):
    """Its loading is its work: it receives no event."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kao_jinja_cache"
    CALLBACK_NEEDS_ENABLED = True
