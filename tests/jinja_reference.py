#!/usr/bin/env python3
"""Renders Jinja templates the way Hugging Face's apply_chat_template does (the reference for
tests/jinja_test.cc): an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
controls, Hugging Face's tojson (no HTML escaping, keys unsorted), raise_exception and
strftime_now. Reads [{"template": str, "context": {...}}, ...] on stdin, writes one
{"ok": rendered} or {"error": "Type: message"} per case on stdout."""
import json
import sys
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

results = []
for case in json.load(sys.stdin):
    try:
        results.append({"ok": env.from_string(case["template"]).render(**case["context"])})
    except Exception as e:  # noqa: BLE001 - every failure is a result the C++ engine must match
        results.append({"error": f"{type(e).__name__}: {e}"})
json.dump(results, sys.stdout, ensure_ascii=False)
