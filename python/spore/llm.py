"""LLMs from Python: spore.llm.load(path) -> LLM, with the tokenizer, chat templates and generation (greedy or sampled,
streaming or not) of `spore generate` (docs/LLM.md).

    lm = spore.llm.load("model.gguf")
    r = lm.generate("Once upon a time", max_tokens=32)           # r.text, r.tokens, r.stop_reason, timings
    for piece in lm.generate("Hi", chat=True, stream=True):      # text as it becomes safe to show
        print(piece, end="")
"""
import queue
import threading
from dataclasses import dataclass, field

from . import _spore


@dataclass
class Generation:
    text: str
    tokens: list = field(default_factory=list)
    stop_reason: str = ""   # "eos", "stop", "length" or "ctx"
    prompt_tokens: int = 0
    ttft_ms: float = 0.0
    prefill_tok_s: float = 0.0
    decode_tok_s: float = 0.0


def _result(d):
    return Generation(text=d["text"].decode("utf-8", "replace"), tokens=list(d["tokens"]), stop_reason=d["stop_reason"],
                      prompt_tokens=d["prompt_tokens"], ttft_ms=d["ttft_ms"], prefill_tok_s=d["prefill_tok_s"],
                      decode_tok_s=d["decode_tok_s"])


_DONE = object()


class Stream:
    """An iterator over generated text pieces; `result` holds the Generation once it is exhausted. The generation
    runs on its own thread (the engine releases the GIL), so pieces arrive while it decodes."""

    def __init__(self, native, ids, opts):
        self._q = queue.Queue()
        self.result = None
        self._error = None

        def run():
            try:
                self.result = _result(native.generate(ids, opts, self._q.put))
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer's thread
                self._error = e
            finally:
                self._q.put(_DONE)

        self._thread = threading.Thread(target=run, name="spore-generate", daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        item = self._q.get()
        if item is _DONE:
            self._thread.join()
            if self._error is not None:
                raise self._error
            raise StopIteration
        return item.decode("utf-8", "replace")


class LLM:
    """A GGUF file or Hugging Face folder loaded for generation, with one KV cache of `ctx` positions (0: what fits
    in memory, at most the model's context) in kv_type (f32, f16, bf16 or int8)."""

    def __init__(self, path, ctx=0, kv_type="f32", max_memory=0):
        self._native = _spore.Llm(str(path), ctx, kv_type, max_memory)
        self.path = str(path)

    @property
    def ctx(self):
        return self._native.ctx

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def encode(self, text, add_special=True, parse_special=False):
        return list(self._native.encode(text, add_special, parse_special))

    def decode(self, ids):
        return self._native.decode(list(ids)).decode("utf-8", "replace")

    def chat_prompt(self, messages):
        """The model's chat template applied to messages ((role, content) pairs or {"role", "content"} dicts),
        ending with the opening of the assistant's turn."""
        pairs = []
        for m in messages:
            if isinstance(m, dict):
                pairs.append((m["role"], m["content"]))
            else:
                role, content = m
                pairs.append((role, content))
        return self._native.chat_prompt(pairs)

    def generate(self, prompt, max_tokens=128, *, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
                 frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=64, seed=0, stop=None, ignore_eos=False,
                 chat=False, add_bos=True, stream=False):
        """Generates from prompt: text (BOS added unless add_bos=False), token ids, or with chat=True a user message
        or a list of messages run through the chat template. Greedy at temperature 0; sampling is reproducible from
        the seed. Returns a Generation, or with stream=True a Stream of text pieces."""
        if chat:
            msgs = [("user", prompt)] if isinstance(prompt, str) else prompt
            ids = self._native.encode(self.chat_prompt(msgs), False, True)
        elif isinstance(prompt, str):
            ids = self._native.encode(prompt, add_bos, False)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(i, int) for i in prompt):
            ids = list(prompt)
        else:
            raise TypeError(f"generate: prompt must be a str or a list of token ids, got {type(prompt).__name__}")
        if isinstance(stop, str):
            stop = [stop]
        opts = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                    repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                    presence_penalty=presence_penalty, penalty_last_n=penalty_last_n, seed=seed, stop=stop or [],
                    ignore_eos=ignore_eos)
        if stream:
            return Stream(self._native, ids, opts)
        return _result(self._native.generate(ids, opts))


def load(path, ctx=0, kv_type="f32", max_memory=0):
    """Loads a GGUF file or a Hugging Face folder (see LLM)."""
    return LLM(path, ctx, kv_type, max_memory)
