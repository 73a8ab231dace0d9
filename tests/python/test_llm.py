"""spore.llm generates the same tokens as `spore generate` on the test GGUF, streaming and not; bad calls raise."""
import json
import os
import subprocess

import pytest

import spore


def cli_generate(path, prompt, n, extra=()):
    cli = os.environ.get("SPORE_CLI") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "spore")
    if not os.path.exists(cli):
        pytest.fail(f"{cli}: no spore binary (set SPORE_CLI; ctest does)")
    out = subprocess.run([cli, "generate", path, "-p", prompt, "-n", str(n), "--json", *extra], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_same_tokens_as_the_cli_streaming_and_not(tiny_gguf):
    path = tiny_gguf
    lm = spore.llm.load(path)
    want = cli_generate(path, "Once upon a time", 24)
    got = lm.generate("Once upon a time", max_tokens=24)
    assert got.tokens == want["tokens"] and got.text == want["text"]
    assert got.prompt_tokens == want["prompt_tokens"] and got.stop_reason == want["stop_reason"]
    s = lm.generate("Once upon a time", max_tokens=24, stream=True)
    pieces = list(s)
    assert "".join(pieces) == want["text"] and s.result.tokens == want["tokens"]
    # sampled: reproducible from the seed, and the CLI's draws
    want_s = cli_generate(path, "Hello", 16, ["--temp", "0.8", "--seed", "7"])
    got_s = lm.generate("Hello", max_tokens=16, temperature=0.8, seed=7)
    assert got_s.tokens == want_s["tokens"]
    assert lm.generate(want["prompt_ids"], max_tokens=24).tokens == want["tokens"]  # token ids in
    assert lm.encode("Once upon a time") == want["prompt_ids"]
    assert lm.decode(want["tokens"]) == want["text"]  # stop_reason "length": the text is every token's


def test_bad_calls_raise(tmp_path, tiny_gguf):
    path = tiny_gguf
    lm = spore.llm.load(path, ctx=64)
    assert lm.ctx == 64
    with pytest.raises(ValueError, match="max_tokens"):
        lm.generate("x", max_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        lm.generate("x", top_p=1.5)
    with pytest.raises(ValueError, match="out of range"):
        lm.generate([lm.vocab_size + 5], max_tokens=2)
    with pytest.raises(TypeError, match="prompt"):
        lm.generate(3.5)
    with pytest.raises(ValueError, match="kv_type"):
        spore.llm.load(path, kv_type="f8")
    with pytest.raises(spore.Error, match="nope.gguf"):
        spore.llm.load(tmp_path / "nope.gguf")
    with pytest.raises(ValueError, match="top_p"):
        list(lm.generate("x", top_p=-1, stream=True))  # raised from the generation thread, in the consumer's
