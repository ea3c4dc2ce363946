#!/usr/bin/python3
"""Renders chat templates with Python's jinja2 exactly as Hugging Face transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now; tools and documents passed as None when absent).
stdin: [{"template", "messages", "add_generation_prompt", "bos_token", "eos_token",
"extra": {...}, "time": unix seconds}, ...]; stdout: [{"ok": true, "text": ...} or
{"ok": false, "error": ...}, ...]."""
import json
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


def make_env(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(now, tz=timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(case):
    env = make_env(case.get("time", 0))
    try:
        tmpl = env.from_string(case["template"])
        extra = dict(case.get("extra", {}))
        variables = {"tools": None, "documents": None}
        variables.update(extra)
        text = tmpl.render(messages=case["messages"],
                           add_generation_prompt=case["add_generation_prompt"],
                           bos_token=case["bos_token"], eos_token=case["eos_token"],
                           **variables)
        return {"ok": True, "text": text}
    except (TemplateError, jinja2.TemplateError, TypeError, ValueError, KeyError,
            AttributeError, IndexError) as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


json.dump([render(c) for c in json.load(sys.stdin)], sys.stdout, ensure_ascii=False)
