"""Loading an embedded model: a ``save_pretrained`` folder directly, a GGUF file through a converted cache.

The first start converts the GGUF (dequantized to float32) with ``from_pretrained(dir, gguf_file=...)`` and saves
the converted model and tokenizer with ``save_pretrained`` into ``<cache_dir>/llm/<gguf name>-<size>/``
(atomically: a temporary folder, marked complete by ``rtc-agent.json``, renamed into place); later starts load
that folder directly (measured on the 2-core CI machine: ~18 s to convert, ~0.3 s from the cache). A broken cache
folder is rebuilt. Converting needs the ``accelerate`` package (transformers requires it for GGUF files); loading
the cache does not. Torch and transformers are imported when a function runs, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rtc_agent.errors import EngineError

log = logging.getLogger(__name__)

_MARKER = "rtc-agent.json"


def cache_folder(cache_dir: Path, gguf: Path) -> Path:
    """The cache folder of a GGUF file: its name and size (a different file never hits a stale cache)."""
    return cache_dir / "llm" / f"{gguf.stem}-{gguf.stat().st_size}"


def load_folder(folder: Path, dtype: Any) -> tuple[Any, Any]:
    """The tokenizer and the causal LM saved in ``folder``, the weights in ``dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, **_dtype_kwargs(dtype))
    return tokenizer, model


def load_gguf(gguf: Path, cache: Path, dtype: Any, progress: Callable[[str], None]) -> tuple[Any, Any, str]:
    """The tokenizer and the causal LM of ``gguf`` (weights in ``dtype``) through the cache folder ``cache``, and
    where they came from: ``"cache"``, or ``"gguf"`` when it was converted (and cached) now.

    Raises ``EngineError(code="engine_load_failed")`` when the GGUF cannot be converted."""
    if (cache / _MARKER).is_file():
        progress(f"loading the converted model from {cache}")
        try:
            tokenizer, model = load_folder(cache, dtype)
            return tokenizer, model, "cache"
        except Exception as exc:  # a damaged cache is rebuilt, not fatal
            log.warning("converted model in %s is unusable (%r); converting again", cache, exc)
            shutil.rmtree(cache, ignore_errors=True)
    tokenizer, model = _convert(gguf, cache, progress)
    return tokenizer, model.to(dtype), "gguf"


def _dtype_kwargs(dtype: Any) -> dict[str, Any]:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"dtype" if major >= 5 else "torch_dtype": dtype}


def _convert(gguf: Path, cache: Path, progress: Callable[[str], None]) -> tuple[Any, Any]:
    """The tokenizer and float32 model of ``gguf``, saved into ``cache`` first."""
    if importlib.util.find_spec("accelerate") is None:
        raise EngineError(
            "converting the GGUF model needs the 'accelerate' package (pip install accelerate)",
            code="engine_load_failed",
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = _dtype_kwargs(torch.float32)  # the cache keeps float32; cast after saving
    try:
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantize
        pass
    t0 = time.monotonic()
    progress(f"converting {gguf.name} (first start only; cached in {cache})")
    with _quiet_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        progress(f"tokenizer read from the GGUF in {time.monotonic() - t0:.1f} s")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, **kwargs)
    progress(f"weights dequantized in {time.monotonic() - t0:.1f} s")
    packed = {type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()}
    if packed:
        raise EngineError(f"the GGUF model kept packed layers {sorted(packed)}; cannot cache it",
                          code="engine_load_failed")
    # the weights are plain float32 now: drop the GGUF quantizer so save_pretrained writes a normal model
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with contextlib.suppress(AttributeError):
        model.is_quantized = False
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=cache.name + ".tmp-"))
    try:
        t1 = time.monotonic()
        with _quiet_progress_bars():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({
            "source": str(gguf), "size": gguf.stat().st_size, "converted_s": round(t1 - t0, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }))
        try:
            os.replace(tmp, cache)
        except OSError:  # another process finished first: use its folder
            if not (cache / _MARKER).is_file():
                raise
        progress(f"saved the converted model in {time.monotonic() - t1:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer, model


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """Silence transformers' tqdm bars while loading (the worker logs our own progress messages)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    # the GGUF converter uses plain tqdm, not transformers' switch
    try:
        gguf_utils: Any = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        gguf_utils = None
    plain_tqdm = getattr(gguf_utils, "tqdm", None)
    if plain_tqdm is not None:
        gguf_utils.tqdm = functools.partial(plain_tqdm, disable=True)
    try:
        yield
    finally:
        if plain_tqdm is not None:
            gguf_utils.tqdm = plain_tqdm
        if enabled:
            hf_logging.enable_progress_bar()
