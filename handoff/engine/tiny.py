"""tiny-hermes: a few-MB Qwen2 model trained here, in about a minute of CPU, to emit Hermes tool calls.

It is a deterministic real-engine test fixture, not an agent: trained on synthetic tau2-style
chats (real airline/retail tool schemas from tau2, a slice of the domain policy as system prompt),
it learns to answer a request with the matching `<tool_call>` (copying the id or e-mail from the
user's message), to reply in text after a tool result, and to greet. Its tokenizer is a small
byte-level BPE (Qwen2Tokenizer) trained on the same chats; its chat template is the project's
Hermes template. Training is seeded and runs a fixed number of steps; `report.json` in the model
directory records the training time and how often greedy decoding emits the expected call.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from handoff.engine.chat import hermes_template

SEED = 1234
VOCAB_SIZE = 2048
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
HERMES_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TRANSFERRED = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
GREETING = "Hello! How can I help you today?"
AFTER_RESULT = "Thank you, I have the details now. How else can I help you?"
FIRST_NAMES = ["mia", "noah", "emma", "liam", "olivia", "yusuf", "sofia", "raj", "chen", "ava"]
LAST_NAMES = ["li", "garcia", "smith", "kim", "patel", "nguyen", "muller", "rossi", "silva"]


@dataclass(frozen=True)
class Intent:
    """A user request that the agent answers with one tool call."""

    domain: str
    tool: str
    phrasings: tuple[str, ...]  # each with one {value}

    def call(self, value: str) -> dict[str, Any]:
        if self.tool == "transfer_to_human_agents":
            return {"summary": "The user asked to speak with a human agent."}
        return {ARGUMENT[self.tool]: value}


ARGUMENT = {
    "get_reservation_details": "reservation_id",
    "get_user_details": "user_id",
    "get_order_details": "order_id",
    "find_user_id_by_email": "email",
}
HUMAN = (
    "I want to talk to a human agent.{value}",
    "Please transfer me to a human.{value}",
    "Can I speak with a real person?{value}",
    "Connect me to a human representative, please.{value}",
)
INTENTS = [
    Intent("airline", "get_reservation_details", (
        "Hi, I need help with my reservation {value}.",
        "Can you check reservation {value} for me?",
        "I want to change my booking {value}.",
        "My reservation id is {value}.",
    )),
    Intent("airline", "get_user_details", (
        "My user id is {value}.",
        "Hello, I am {value} and I need help with my flights.",
        "You can find me under the user id {value}.",
    )),
    Intent("retail", "get_order_details", (
        "Where is my order {value}?",
        "I want to return the items of order {value}.",
        "Please check my order {value}.",
        "Hi, my order number is {value}.",
    )),
    Intent("retail", "find_user_id_by_email", (
        "My email is {value}.",
        "Hi, you can find my account with the email {value}.",
        "I need help, my e-mail address is {value}.",
    )),
    Intent("airline", "transfer_to_human_agents", HUMAN),
    Intent("retail", "transfer_to_human_agents", HUMAN),
]
GREETINGS = ("Hi.", "Hello, I need some help.", "Hi there!", "Good morning.", "Hey, can you help me?")


@cache
def domain_tools() -> dict[str, list[dict]]:
    """tau2's airline and retail tools, compacted (see `compact`)."""
    from tau2.domains.airline.environment import get_environment as airline
    from tau2.domains.retail.environment import get_environment as retail

    import handoff  # noqa: F401  (quiet tau2's imports)

    return {
        name: [compact(tool.openai_schema) for tool in env().get_tools()]
        for name, env in (("airline", airline), ("retail", retail))
    }


def compact(schema: dict) -> dict:
    """A tau2 tool schema without titles and parameter descriptions, keeping its first sentence:
    short prompts keep CPU training of the tiny model cheap."""
    function = schema["function"]
    parameters = function["parameters"]
    properties = {
        name: {k: v for k, v in spec.items() if k not in ("title", "description")}
        for name, spec in parameters.get("properties", {}).items()
    }
    return {"type": "function", "function": {
        "name": function["name"],
        "description": function.get("description", "").split(".")[0] + ".",
        "parameters": {"type": "object", "properties": properties,
                       "required": parameters.get("required", [])},
    }}


@cache
def domain_policy(domain: str) -> str:
    from tau2.domains.airline.utils import AIRLINE_POLICY_PATH
    from tau2.domains.retail.utils import RETAIL_POLICY_PATH

    path = {"airline": AIRLINE_POLICY_PATH, "retail": RETAIL_POLICY_PATH}[domain]
    return Path(path).read_text()


def random_value(rng: random.Random, tool: str) -> str:
    alnum = string.ascii_uppercase + string.digits
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    return {
        "get_reservation_details": lambda: "".join(rng.choices(alnum, k=6)),
        "get_user_details": lambda: f"{first}_{last}_{rng.randint(1000, 9999)}",
        "get_order_details": lambda: f"#W{rng.randint(1000000, 9999999)}",
        "find_user_id_by_email": lambda: f"{first}.{last}{rng.randint(1, 99)}@example.com",
        "transfer_to_human_agents": lambda: rng.choice(["", " Now.", " I am tired of this."]),
    }[tool]()


def system_prompt(rng: random.Random, domain: str) -> str:
    """A random slice of the real policy (0 or 100 characters) after a fixed first line."""
    policy = domain_policy(domain)
    start = rng.randrange(len(policy))
    return f"You are a customer service agent for the {domain} domain.\n" + policy[
        start : start + rng.choice([0, 0, 100])
    ]


def tool_subset(rng: random.Random, domain: str, needed: str) -> list[dict]:
    """The needed tool and at most one other tool of the domain, in random order."""
    tools = domain_tools()[domain]
    others = [t for t in tools if t["function"]["name"] != needed]
    chosen = rng.sample(others, rng.randint(0, 1)) + [
        t for t in tools if t["function"]["name"] == needed
    ]
    rng.shuffle(chosen)
    return chosen


def tool_call_message(tool: str, arguments: dict, call_id: str) -> dict:
    function = {"name": tool, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


def example(rng: random.Random) -> tuple[list[dict], list[dict]]:
    """One synthetic chat: [greeting exchange], request, tool call, tool result, reply."""
    intent = rng.choice(INTENTS)
    value = random_value(rng, intent.tool)
    messages = [{"role": "system", "content": system_prompt(rng, intent.domain)}]
    if rng.random() < 0.3:
        messages += [{"role": "user", "content": rng.choice(GREETINGS)},
                     {"role": "assistant", "content": GREETING}]
    result = "Transfer successful" if intent.tool == "transfer_to_human_agents" else json.dumps(
        {ARGUMENT[intent.tool]: value, "status": rng.choice(["active", "pending", "delivered"])}
    )
    messages += [
        {"role": "user", "content": rng.choice(intent.phrasings).format(value=value)},
        tool_call_message(intent.tool, intent.call(value), "call_0"),
        {"role": "tool", "tool_call_id": "call_0", "content": result},
        {"role": "assistant",
         "content": TRANSFERRED if intent.tool == "transfer_to_human_agents" else AFTER_RESULT},
    ]
    return messages, tool_subset(rng, intent.domain, intent.tool)


def train_tokenizer(texts: list[str]) -> Any:
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    base = Qwen2Tokenizer(eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer = base.train_new_from_iterator(texts, vocab_size=VOCAB_SIZE, new_special_tokens=SPECIAL)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in HERMES_TAGS])
    tokenizer.chat_template = hermes_template()
    return tokenizer


def assistant_mask(text: str, offsets: list[tuple[int, int]]) -> list[bool]:
    """True for tokens of assistant replies (their text and the closing <|im_end|>)."""
    spans = [(m.end(), text.index("<|im_end|>", m.end()) + len("<|im_end|>"))
             for m in re.finditer(r"<\|im_start\|>assistant\n", text)]
    return [any(lo <= a and b <= hi for lo, hi in spans) and b > a for a, b in offsets]


def encode_examples(tokenizer: Any, chats: list[tuple[list[dict], list[dict]]]) -> list[tuple]:
    encoded = []
    for messages, tools in chats:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        encoded.append((enc["input_ids"], assistant_mask(text, enc["offset_mapping"])))
    return encoded


def new_model(tokenizer: Any) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=96,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=3,  # head_dim 32: the smallest the vLLM CPU attention backend takes
        num_key_value_heads=1,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    return Qwen2ForCausalLM(config)


def batches(encoded: list[tuple], batch_size: int, steps: int, pad_id: int):
    """Seeded batches of similar lengths (little padding), with loss only on assistant tokens."""
    import torch

    rng = random.Random(SEED)
    by_length = sorted(encoded, key=lambda pair: len(pair[0]))
    for _ in range(steps):
        start = rng.randrange(len(by_length) - batch_size + 1)
        batch = by_length[start : start + batch_size]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((batch_size, width), pad_id)
        targets = torch.zeros((batch_size, width), dtype=torch.bool)
        for row, (tokens, mask) in enumerate(batch):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            targets[row, : len(tokens) - 1] = torch.tensor(mask[1:])
        yield ids, targets


def masked_loss(model: Any, ids: Any, targets: Any) -> Any:
    """Next-token loss where `targets` marks positions whose next token is an assistant token.

    The LM head runs on those positions only: most of a prompt is never predicted.
    """
    import torch

    hidden = model.model(input_ids=ids).last_hidden_state  # right padding: causal mask suffices
    logits = model.lm_head(hidden[targets])
    return torch.nn.functional.cross_entropy(logits, ids[:, 1:][targets[:, :-1]])


def train(model: Any, encoded: list[tuple], pad_id: int, steps: int, batch_size: int) -> list[float]:
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * step / steps)))
    )
    model.train()
    losses = []
    for ids, targets in batches(encoded, batch_size, steps, pad_id):
        loss = masked_loss(model, ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(round(loss.item(), 4))
    model.eval()
    return losses


def expected_call(messages: list[dict]) -> dict:
    call = messages[-3]["tool_calls"][0]["function"]
    return {"name": call["name"], "arguments": json.loads(call["arguments"])}


def parse_calls(text: str) -> list[dict]:
    """Hermes calls in `text` (a JSON error raises: the caller counts it as invalid)."""
    return [json.loads(body) for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)]


def evaluate(model: Any, tokenizer: Any, n: int) -> dict[str, float]:
    """Greedy decoding on n held-out requests: share of parseable calls and of exact calls."""
    import torch

    rng = random.Random(SEED + 1)
    valid = exact = 0
    for _ in range(n):
        messages, tools = example(rng)
        prompt = messages[:-3]  # up to the request
        ids = tokenizer.apply_chat_template(
            prompt, tools=tools, add_generation_prompt=True, tokenize=False
        )
        inputs = torch.tensor([tokenizer.encode(ids, add_special_tokens=False)])
        with torch.no_grad():
            out = model.generate(inputs, max_new_tokens=80, do_sample=False)
        text = tokenizer.decode(out[0, inputs.shape[1] :], skip_special_tokens=True)
        try:
            calls = parse_calls(text)
        except ValueError:
            continue
        valid += len(calls) == 1 and set(calls[0]) == {"name", "arguments"}
        exact += calls == [expected_call(messages)]
    return {"valid_call_rate": valid / n, "exact_call_rate": exact / n}


def build(out: Path, steps: int = 500, batch_size: int = 8, n_examples: int = 3000) -> dict:
    """Train tiny-hermes and save model, tokenizer and report.json into `out`."""
    import torch

    torch.manual_seed(SEED)
    started = time.perf_counter()
    rng = random.Random(SEED)
    chats = [example(rng) for _ in range(n_examples)]
    tokenizer = train_tokenizer(
        [tokenizer_text for m, t in chats[:1000] for tokenizer_text in _texts(m, t)]
    )
    encoded = encode_examples(tokenizer, chats)
    model = new_model(tokenizer)
    losses = train(model, encoded, tokenizer.pad_token_id, steps, batch_size)
    train_seconds = time.perf_counter() - started
    report = {
        "train_seconds": round(train_seconds, 1),
        "steps": steps,
        "batch_size": batch_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": sum(losses[-20:]) / 20,
        "torch_threads": torch.get_num_threads(),
        **evaluate(model, tokenizer, 50),
    }
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "report.json").write_text(json.dumps({**report, "losses": losses[::10]}, indent=1))
    return report


def _texts(messages: list[dict], tools: list[dict]) -> list[str]:
    """Raw strings for tokenizer training: message contents, calls and tool schemas."""
    return [m.get("content") or json.dumps(m.get("tool_calls")) for m in messages] + [
        json.dumps(t) for t in tools
    ]
