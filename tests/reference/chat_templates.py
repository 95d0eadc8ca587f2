#!/usr/bin/env python3
"""Renders real models' chat templates with Jinja2 as Hugging Face transformers
does, and writes the expected prompts for tests/tokenize/chat_template_test.cpp.

    apt-get install -y python3-jinja2        # Jinja2 3.1
    python3 tests/reference/chat_templates.py > tests/data/chat_templates/expected.json

The environment is transformers' (utils/chat_template_utils.py,
_compile_jinja_template and render_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension, a tojson filter that is json.dumps(ensure_ascii=False,
...), the globals raise_exception (a TemplateError) and strftime_now, and the
variables messages, tools (None), documents (None), add_generation_prompt and
the tokenizer's special tokens. strftime_now formats a fixed time (NOW, noon
UTC, so the date is the same in every time zone) so that the prompts are
reproducible; the C++ test passes the same time (ChatOptions::now).

The templates are the files *.jinja beside the output: the strings the models
ship in tokenizer_config.json "chat_template" (copied from llama.cpp's
models/templates, which fetches them from the Hugging Face hub), plus
zephyr.jinja (TinyLlama-1.1B-Chat / Zephyr) and chatml.jinja (the ChatML
template of many fine-tunes).
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1721995200  # 2024-07-26 12:00:00 UTC

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat_templates")

# file -> (bos_token, eos_token) as the model's tokenizer_config.json sets them
# (None: the tokenizer has none, so the variable is undefined).
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": (None, "<|im_end|>"),
    "Qwen-QwQ-32B.jinja": (None, "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("<s>", "</s>"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("<s>", "</s>"),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "HuggingFaceTB-SmolLM3-3B.jinja": (None, "<|im_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("<|end_of_text|>", "<|end_of_text|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("<|begin_of_text|>", "<|im_end|>"),
    "zephyr.jinja": ("<s>", "</s>"),
    "chatml.jinja": (None, "<|im_end|>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather «now» in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city, e.g. \"Paris\""},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}]
TOOL_CALL = {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call12345", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}

CONVERSATIONS = {
    "system_user": {"messages": [SYSTEM, {"role": "user", "content": "Hello!"}]},
    "user": {"messages": [{"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello! How can I help?"},
                                {"role": "user", "content": "Tell me a joke."}]},
    "system_multi_turn": {"messages": [SYSTEM, {"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "  Hello!\n"},
                                       {"role": "user", "content": "Bye"}]},
    "assistant_last": {"messages": [SYSTEM, {"role": "user", "content": "Name a color."},
                                    {"role": "assistant", "content": "Blue."}]},
    "unicode_quotes": {"messages": [
        {"role": "user", "content": "Ünïcödé 日本語 🙂 «guillemets» \"double\" 'single' \\backslash\n  indented  "},
        {"role": "assistant", "content": "Réponse : « oui » 'yes' \"no\" — ok\u2028"},
        {"role": "user", "content": "\ttabs\tand {{ braces }} {% not a tag %}  "}]},
    "thinking": {"messages": [{"role": "user", "content": "2+2?"},
                              {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
                              {"role": "user", "content": "And 3+3?"}]},
    "thinking_off": {"messages": [{"role": "user", "content": "2+2?"}],
                     "variables": {"enable_thinking": False}},
    "tools": {"messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}, TOOL_CALL, TOOL_RESULT],
              "variables": {"tools": TOOLS}},
    "bad_roles": {"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
}


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = environment()
    cases = []
    for file, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(HERE, file), encoding="utf-8") as f:
            template = env.from_string(f.read())
        for conv_name, conv in CONVERSATIONS.items():
            for add in (False, True):
                kwargs = {"messages": conv["messages"], "tools": None, "documents": None,
                          "add_generation_prompt": add}
                if bos is not None:
                    kwargs["bos_token"] = bos
                if eos is not None:
                    kwargs["eos_token"] = eos
                kwargs.update(conv.get("variables", {}))
                case = {"template": file, "conversation": conv_name, "add_generation_prompt": add}
                try:
                    case["output"] = template.render(**kwargs)
                except jinja2.exceptions.TemplateError as e:
                    # raise_exception's TemplateError, or an UndefinedError etc.
                    case["error"] = str(e)
                    case["raised"] = type(e) is jinja2.exceptions.TemplateError
                except Exception as e:  # a TypeError from the template's own operands
                    case["error"] = f"{type(e).__name__}: {e}"
                    case["raised"] = False
                cases.append(case)
    out = {
        "generator": "tests/reference/chat_templates.py, Jinja2 " + jinja2.__version__,
        "now": NOW,
        "templates": {f: {"bos_token": b, "eos_token": e} for f, (b, e) in TEMPLATES.items()},
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
