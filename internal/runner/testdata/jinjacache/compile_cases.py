# Cases where compiling decides what a template does, run against
# kao_jinja_cache by TestJinjaCacheKeepsWhatCompilingDecides: each must come
# out as Jinja alone makes it. Arguments: the plugin's directory, an empty
# cache directory. Prints "ok" or fails with the case that broke.
import importlib.util
import os
import random
import sys

import jinja2

spec = importlib.util.spec_from_file_location("kao_jinja_cache", sys.argv[1] + "/kao_jinja_cache.py")
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
plugin.install(sys.argv[2])


def render(env, source, **ctx):
    return env.from_string(source).render(**ctx)


# A filter applied to constants is called while compiling, unless it takes
# the context (Ansible's random takes the environment): each compilation
# must call it again, not reuse another's result.
@jinja2.pass_environment
def draw(environment, seq):
    return random.choice(seq)


def drawing():
    env = jinja2.Environment()
    env.filters["draw"] = draw
    return env


draws = {render(drawing(), "{{ 'abcdefghijklmnopqrstuvwxyz' | draw }}") for _ in range(8)}
assert len(draws) > 1, "every compilation drew the same letter: %s" % draws

# Whether a filter gets the context is decided while compiling, from the
# filters the environment has: code compiled where the filter was unknown
# must not serve an environment where it takes the context.
source = "{% if y is defined %}{{ x | myf }}{% endif %}"
assert render(jinja2.Environment(), source) == ""


@jinja2.pass_context
def myf(context, value):
    return "%s with y=%s" % (value, context["y"])


env = jinja2.Environment()
env.filters["myf"] = myf
got = render(env, source, x=2, y=1)
assert got == "2 with y=1", got

# Autoescaping is compiled in.
assert render(jinja2.Environment(autoescape=False), "{{ x }}", x="<b>") == "<b>"
got = render(jinja2.Environment(autoescape=True), "{{ x }}", x="<b>")
assert got == "&lt;b&gt;", got

# Delimiters are the lexer's.
plain = jinja2.Environment()
other = jinja2.Environment(variable_start_string="[%", variable_end_string="%]")
assert render(plain, "[% x %] {{ x }}", x=1) == "[% x %] 1"
got = render(other, "[% x %] {{ x }}", x=1)
assert got == "1 {{ x }}", got

# And the cache is used: a second environment loads what the first compiled.
before = len(os.listdir(sys.argv[2]))
render(jinja2.Environment(), "{{ 'cached: ' ~ x }}", x=1)
assert len(os.listdir(sys.argv[2])) == before + 1
calls = []
real = jinja2.Environment._generate


def counting(self, *args, **kwargs):
    calls.append(1)
    return real(self, *args, **kwargs)


jinja2.Environment._generate = counting
assert render(jinja2.Environment(), "{{ 'cached: ' ~ x }}", x=2) == "cached: 2"
assert not calls, "the second environment compiled the template again"
print("ok")
