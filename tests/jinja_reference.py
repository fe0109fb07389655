#!/usr/bin/env python3
"""Renders Jinja templates the way Hugging Face's apply_chat_template does (the reference for
tests/jinja_test.cc): an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop
controls and {% generation %}, Hugging Face's tojson (no HTML escaping, keys unsorted),
raise_exception and strftime_now. Reads [{"template": str, "context": {...}}, ...] on stdin, writes one
{"ok": rendered} or {"error": "Type: message"} per case on stdout."""
import json
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


class AssistantTracker(Extension):
    """{% generation %}...{% endgeneration %}, as Hugging Face's extension of that name renders
    it (it also records where the assistant's text is, which rendering does not show)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[AssistantTracker, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

compiled = {}  # source -> Template: each template is compiled once for all its cases
results = []
for case in json.load(sys.stdin):
    try:
        source = case["template"]
        if source not in compiled:
            compiled[source] = env.from_string(source)
        results.append({"ok": compiled[source].render(**case["context"])})
    except Exception as e:  # noqa: BLE001 - every failure is a result the C++ engine must match
        results.append({"error": f"{type(e).__name__}: {e}"})
json.dump(results, sys.stdout, ensure_ascii=False)
