"""What ``view_api()`` and the OpenAPI-style API info say of each parameter of the named endpoints:
its description (the same text an MCP agent reads: the endpoint's docstring, each tab's ``DOC``)
and its true type.

Gradio describes a component, not a parameter: a ``Dropdown`` that also takes other values is typed
as the few choices it was built with (``layer`` as VGG's ReLUs only, ``/gradcam``'s as ResNet-50's),
a ``Slider`` that counts (steps, top-k) as a float, and nothing says what a parameter means.
"""

from __future__ import annotations

import re
from typing import Any

import gradio as gr

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.config import AppConfig
from nstcam.app.guard.gate import input_names

__all__ = ["describe_api", "parameter_docs"]

_ARG = re.compile(r"^ {4}(\w+): (.*)$")
_FILEDATA_DOC = "The FileData class"


def parameter_docs(doc: str) -> dict[str, str]:
    """The ``name: description`` lines of a docstring's ``Args:`` section."""
    args = doc.split("Args:", 1)[-1].split("Returns:", 1)[0]
    return {m[1]: m[2] for m in map(_ARG.match, args.splitlines()) if m}


def _schema(comp: Any) -> dict[str, Any]:
    """``comp``'s API schema with its true type: whole numbers as integers, a name that takes other
    values than its first choices as free text."""
    base = dict(comp.api_info())
    for key in ("additional_description", "description"):  # Gradio's FileData docstring: what to send is ours
        if str(base.get(key, "")).startswith(_FILEDATA_DOC):
            base.pop(key)
    if isinstance(comp, gr.Number) and getattr(comp, "precision", None) == 0:
        return {**base, "type": "integer"}
    if isinstance(comp, gr.Slider) and comp.step == 1 and float(comp.minimum or 0).is_integer():
        return {**base, "type": "integer"}
    values = [c[1] if isinstance(c, (tuple, list)) else c for c in getattr(comp, "choices", None) or ()]
    if isinstance(comp, (gr.Dropdown, gr.Radio)) and values and all(_is_int(v) for v in values):
        # a built-in style's number: Gradio types every dropdown as text ("-1" was then refused by
        # its own enum of integers, and -1 by its type), and gradio_client writes any enum as
        # texts (Literal['-1', '0', ...]), which the server refuses: a range of integers instead
        kept = {k: v for k, v in base.items() if k not in ("anyOf", "enum")}
        if sorted(values) == list(range(min(values), max(values) + 1)):
            return {**kept, "type": "integer", "minimum": min(values), "maximum": max(values)}
        return {**kept, "type": "integer", "enum": values}
    if isinstance(comp, gr.Dropdown) and comp.allow_custom_value and not comp.multiselect:
        # a layer: any of the model's, not the few names it was built with (a list keeps its
        # choices: every offered model's class names, which the description sorts out)
        return {**{k: v for k, v in base.items() if k not in ("anyOf", "enum")}, "type": "string"}
    return base


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def describe_api(demo: gr.Blocks, config: AppConfig) -> gr.Blocks:
    """Gives every input of every named endpoint its description and true type in the API info (an
    input two endpoints share, such as ``/gradcam``'s and ``/faithfulness``'s image, keeps the
    first one's)."""
    described: set[int] = set()
    for fn in demo.fns.values():
        doc = getattr(fn.fn, "__doc__", None) or ""
        if not fn.api_name or "Args:" not in doc or getattr(fn, "api_visibility", "public") != "public":
            continue
        docs = parameter_docs(doc)
        for comp, name in zip(fn.inputs, input_names(fn.fn, len(fn.inputs)), strict=False):
            if gradio_internals.component_id(comp) in described:
                continue
            described.add(gradio_internals.component_id(comp))
            schema = _schema(comp)
            extra = schema.get("additional_description")
            schema["additional_description"] = " ".join(t for t in (extra, docs.get(name)) if t)
            for info in ("api_info", "api_info_as_input"):
                gradio_internals.install(comp, info, lambda _, s=schema: lambda: s, again=True)
    gradio_internals.refresh_config(demo)  # the config Gradio serves was taken when the Blocks closed
    return demo
