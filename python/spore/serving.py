"""`spore serve` from Python: an OpenAI-compatible server for LLMs (.gguf, Hugging Face folders) and a KServe v2
server for tensor models (.onnx, .spore), with /health and /metrics (docs/SERVE.md).

    with spore.Server("model.gguf", port=0, parallel=4) as srv:   # returns once the models are warmed up
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="-")
        ...
    spore.serve("model.gguf", port=8080)   # blocks until Ctrl-C / SIGTERM, then drains in-flight requests

Both run the server on an engine thread without the GIL; Python keeps its own signal handling.

Options are the CLI's (`spore serve --help`) with underscores: host, port (0: any free port), parallel, ctx, kv_type,
max_memory (bytes or "2GB" / "512MiB", as the CLI), max_queue, max_queued_tokens, prefix_cache, api_key, threads, timeout, max_body, chat_template,
batching ("auto" | "on" | "off"), max_batch, batch_delay_ms, http_threads, shutdown_timeout, access_log.
"""
import os
import signal
import threading
import time

from . import _spore

_OPTIONS = {"host", "port", "parallel", "ctx", "kv_type", "max_memory", "max_queue", "max_queued_tokens",
            "prefix_cache", "api_key", "threads", "timeout", "max_body", "chat_template", "batching", "max_batch",
            "batch_delay_ms", "http_threads", "shutdown_timeout", "access_log"}


def _models(model, models):
    out = []
    if model is not None:
        out.append(("", os.fspath(model)))
    for name, path in (models or {}).items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"serve: model names must be non-empty strings, got {name!r}")
        out.append((name, os.fspath(path)))
    if not out:
        raise ValueError("serve: give a model path (or models={name: path})")
    return out


def _options(kw):
    from .context import _bytes
    unknown = sorted(set(kw) - _OPTIONS)
    if unknown:
        raise TypeError(f"serve: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(_OPTIONS))})")
    for k in ("max_memory", "max_body"):  # sizes as the CLI takes them: "2GB", "512MiB", or bytes
        if kw.get(k) is not None:
            kw[k] = _bytes(kw[k], k)
    return kw


class Server:
    """A server running on a background thread. The constructor returns once every model is loaded and warmed up
    (or raises spore.Error naming the model that failed); stop() (or leaving the `with` block) shuts it down
    gracefully. Python keeps its own Ctrl-C handling."""

    def __init__(self, model=None, *, models=None, **options):
        self._s = _spore._Server(_models(model, models), _options(options))

    @property
    def port(self):
        return self._s.port

    @property
    def url(self):
        host = self._s.host
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    @property
    def running(self):
        return self._s.running

    def stop(self):
        self._s.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"spore.Server({self.url}, {'running' if self.running else 'stopped'})"


def serve(model=None, *, models=None, **options):
    """Serves until Ctrl-C (KeyboardInterrupt) or SIGTERM, then drains in-flight requests and returns. Raises
    spore.Error when a model fails to load. Prints "listening on http://HOST:PORT" once bound."""
    def on_term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term) if threading.current_thread() is threading.main_thread() else None
    srv = None
    try:
        srv = Server(model, models=models, **options)  # a Ctrl-C while it starts stops it as it is dropped
        while srv.running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        if srv is not None:
            srv.stop()
        if old is not None:
            signal.signal(signal.SIGTERM, old)
