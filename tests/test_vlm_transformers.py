"""A tiny transformers VLM built from a config runs through the realtime session end to end.

The model is Idefics3 (the SmolVLM architecture) with one vision layer, one text layer and 32-wide hidden sizes,
random weights. Its tokenizer is built here with the ``tokenizers`` library: byte-level BPE without merges (one
token per UTF-8 byte, so multi-byte characters span tokens) plus Idefics3's special tokens; its processor is
``Idefics3Processor`` with the PIL image processor (32 px, no splitting: 4 image tokens per frame) and the SmolVLM
chat template. Everything is saved to tmp_path and loaded back through the engine's real loading code
(``AutoProcessor`` / ``AutoModelForImageTextToText``, local files only). SmolVLM's own processor was not used:
it needs the ``num2words`` package, which is not installed; Idefics3's is the same format without it.

A second family, Qwen2-VL (3D rotary positions), checks that positions continue across appended segments. Its
processor class cannot be built here (it requires a torchvision video processor), so a small shim does what it
does for images: the PIL image processor, the ``<|image_pad|>`` expansion and ``mm_token_type_ids``.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor, PreTrainedTokenizerFast
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from rtc_agent.engines.vlm import SessionBusy, SessionOptions
from rtc_agent.engines.vlm.chat_format import ROUND_END, ROUND_START, SILENCE
from rtc_agent.engines.vlm.moss_native import MossNativeSession
from rtc_agent.engines.vlm.realtime import RealtimeVisionSession
from rtc_agent.engines.vlm.transformers_source import TransformersTokenSource
from rtc_agent.engines.vlm.transformers_vlm import TransformersVLMEngine
from tests.polling import collect, wait_until

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] "
    "== 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == "
    "'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
EOU = "<end_of_utterance>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


def build_tiny_vlm(folder: Path) -> None:
    b2u = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<fake_token_around_image>", "<image>", EOU, "<global-img>"]
    specials += [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token=EOU,
                                        pad_token="<|endoftext|>", additional_special_tokens=specials)
    image_processor = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": 32},
                                                max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=CHAT_TEMPLATE)
    eou = tokenizer.convert_tokens_to_ids(EOU)
    config = Idefics3Config(
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": len(tokenizer),
                     "max_position_embeddings": 4096, "pad_token_id": tokenizer.pad_token_id,
                     "eos_token_id": eou},
        scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"), tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = eou
    model.save_pretrained(folder)
    processor.save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-idefics3")
    build_tiny_vlm(folder)
    return folder


def load_engine(folder: Path, **kwargs: Any) -> TransformersVLMEngine:
    engine = TransformersVLMEngine(str(folder), **kwargs)
    engine.load(lambda msg: None)
    return engine


class ScriptedHead(torch.nn.Module):
    """Replaces the LM head: logits that pick the scripted ids in turn (the model's computation still runs)."""

    def __init__(self, vocab_size: int, script: list[int]) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.script = script
        self.calls = 0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*hidden.shape[:-1], self.vocab_size)
        logits[..., self.script[self.calls % len(self.script)]] = 10.0
        self.calls += 1
        return logits


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (48, 64, 3), dtype=np.uint8)






SLOW = 20.0  # seconds: a real (tiny) model on a busy CI machine
OPTIONS = SessionOptions(initial_prompt="Describe changes.", system_prompt="Be brief.", max_tokens_per_turn=1000,
                         max_new_tokens=12)


def test_random_tiny_model_runs_through_the_session(tiny_vlm: Path) -> None:
    engine = load_engine(tiny_vlm)
    assert not engine.native
    session = engine.open_session(OPTIONS)
    assert isinstance(session, RealtimeVisionSession)
    source = session.source
    assert isinstance(source, TransformersTokenSource)
    assert not source.moss_format  # no <|silence|> in this vocabulary: end of turn stands for it
    assert source.silence_ids == {source.tokenizer.convert_tokens_to_ids(t) for t in (EOU, "<|endoftext|>")}
    assert source.tokenizer.convert_tokens_to_ids("<image>") in source.suppress_ids
    assert source.chat_format.frame(1.25) == (
        "<|vision_start|><|time_start|>1.2 seconds<|time_end|><image><|vision_end|>")
    with session:
        wait_until(lambda: session.parked, timeout=SLOW)  # a model without silence waits for the first frame
        assert source.context_tokens == 0
        before = source._initial_ids.shape[1]
        session.push_frame(frame(1), 1.0)
        session.push_frame(frame(2), 2.0)
        wait_until(lambda: session.parked and session.counters["tokens"] > 0, timeout=SLOW)
        # the prefill, two frames (wrapper text + 6 image tokens each) and the decoded tokens are in the cache
        assert source.context_tokens >= before + 2 * (6 + len("<|vision_start|>")) + session.counters["tokens"] - 1
        spontaneous = collect(session.poll_event, lambda o: any(e.kind == "text" for e in o), timeout=SLOW)
        assert not spontaneous[0].prompted and spontaneous[0].frame_ts in (1.0, 2.0)
        while session.poll_event(0.0) is not None:
            pass
        session.push_prompt("What changed?")
        events = collect(session.poll_event, lambda o: any(e.kind == "text" and e.prompted for e in o), timeout=SLOW)
        start = next(e for e in events if e.kind == "round_start" and e.prompted)
        assert start.prompt == "What changed?"
        assert all("\ufffd" not in e.text for e in events if e.kind == "text")
        with pytest.raises(SessionBusy):
            engine.open_session(OPTIONS)
    assert not engine.slot.busy
    engine.close()


def test_end_of_turn_is_mapped_to_silence_and_turns_follow_the_template(tiny_vlm: Path) -> None:
    engine = load_engine(tiny_vlm)
    tokenizer = engine.processor.tokenizer
    eou = tokenizer.convert_tokens_to_ids(EOU)
    language = engine.model.lm_head.weight.shape[0]
    engine.model.lm_head = ScriptedHead(language, [ord("o"), ord("k"), eou])
    session = engine.open_session(OPTIONS)
    source = session.source
    fed: list[str] = []
    feed = source.feed
    source.feed = lambda segment: (fed.append(segment.text), feed(segment))[1]  # type: ignore[method-assign]
    wrapper = "<|vision_start|><|time_start|>{:.1f} seconds<|time_end|><image><|vision_end|>"
    with session:
        session.push_frame(frame(1), 1.0)
        out = []
        while SILENCE not in out:
            item = session.poll_output(timeout=5)
            assert item is not None
            out.append(item)
        assert out == ["o", "k", SILENCE]
        wait_until(lambda: session.parked, timeout=SLOW)
        session.push_frame(frame(2), 2.0)
        events = collect(session.poll_event, lambda o: any(e.kind == "silence" for e in o), timeout=SLOW)
        assert "".join(e.text for e in events if e.kind == "text") == "ok"
        assert all(e.frame_ts == 2.0 for e in events if e.kind != "round_end")
        wait_until(lambda: session.parked, timeout=SLOW)
        session.push_prompt("Anything new?")
        out = []
        while ROUND_END not in out:
            item = session.poll_output(timeout=5)
            assert item is not None
            out.append(item)
        assert out == [ROUND_START, "o", "k", SILENCE, ROUND_END]
    initial = tokenizer.decode(source._initial_ids[0])
    assert initial == "<|im_start|>System: Be brief.<end_of_utterance>\nUser: Describe changes."
    assert fed == [
        wrapper.format(1.0) + "<end_of_utterance>\nAssistant:",  # closes the standing user turn
        "\nUser: " + wrapper.format(2.0) + "<end_of_utterance>\nAssistant:",  # a new turn after the model's end
        "\nUser: Anything new?<end_of_utterance>\nAssistant:",
    ]
    engine.close()


def test_the_context_is_bounded(tiny_vlm: Path) -> None:
    engine = load_engine(tiny_vlm, max_context_tokens=160)
    session = engine.open_session(OPTIONS)
    source = session.source
    with session:
        for i in range(6):
            session.push_frame(frame(i), float(i))
            wait_until(lambda n=i: session.parked and session.counters["frames_fed"] == n + 1, timeout=SLOW)
        assert source.resets >= 1
        assert source.context_tokens <= 160
    engine.close()


def test_a_missing_model_folder_fails_to_load(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_engine(tmp_path / "missing")


class FakeMossSession:
    """Stands in for MOSS-VL's own MossVLRealtimeSession: records inputs, yields scripted raw chunks."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.frames: list[tuple[Any, float | None]] = []
        self.prompts: list[str] = []
        self.outputs: list[str] = []
        self.lock = threading.Lock()
        self.started = self.closed = False

    @property
    def active(self) -> bool:
        return self.started and not self.closed

    @property
    def pending_frames(self) -> int:
        return 0

    def start(self) -> FakeMossSession:
        self.started = True
        return self

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool:
        self.frames.append((image, timestamp))
        with self.lock:
            self.outputs += ["A dog", " runs.", SILENCE] if timestamp == 2.0 else [SILENCE]
        return False

    def push_prompt(self, prompt: str) -> None:
        self.prompts.append(prompt)
        with self.lock:
            self.outputs += [ROUND_START, "<|response|>Brown.", SILENCE]

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        self.push_frame(image, timestamp)
        self.push_prompt(prompt)
        return False

    def poll_output(self, timeout: float = 0.0) -> str | None:
        with self.lock:
            if self.outputs:
                return self.outputs.pop(0)
        time.sleep(min(timeout, 0.01))
        return None

    def close(self, timeout: float | None = 5.0) -> None:
        self.closed = True


class FakeMossModel:
    def __init__(self) -> None:
        self.sessions: list[FakeMossSession] = []

    def create_realtime_session(self, processor: Any, **kwargs: Any) -> FakeMossSession:
        session = FakeMossSession(processor=processor, **kwargs)
        self.sessions.append(session)
        return session


def test_a_model_with_create_realtime_session_runs_its_own_session() -> None:
    model = FakeMossModel()
    engine = TransformersVLMEngine(model=model, processor="the-processor")
    engine.load(lambda msg: None)
    assert engine.native and engine.describe()["native_session"]
    session = engine.open_session(OPTIONS)
    assert isinstance(session, MossNativeSession)
    inner = model.sessions[0]
    assert inner.kwargs == {"processor": "the-processor", "initial_prompt": "Describe changes.",
                            "system_prompt": "Be brief.", "frame_queue_size": 8, "max_tokens_per_turn": 1000,
                            "max_new_tokens": 12}
    with session:
        session.push_frame(frame(1), 1.0)
        session.push_frame(frame(2), 2.0)
        events = collect(session.poll_event, lambda o: sum(e.kind == "silence" for e in o) == 2, timeout=SLOW)
        assert "".join(e.text for e in events if e.kind == "text") == "A dog runs."
        with pytest.raises(ValueError, match=r"non-decreasing: 1\.5 < 2\.0"):
            session.push_frame(frame(3), 1.5)
        session.push_prompt("What colour?")
        events = collect(session.poll_event, lambda o: any(e.kind == "round_end" and e.prompted for e in o),
                         timeout=SLOW)
        start = next(e for e in events if e.kind == "round_start")
        assert start.prompt == "What colour?"
        assert "".join(e.text for e in events if e.kind == "text") == "Brown."
    assert inner.closed
    assert inner.frames[0][0].size == (64, 48)  # numpy frames arrive as PIL images
    assert [ts for _, ts in inner.frames] == [1.0, 2.0]
    assert not engine.slot.busy


class QwenShimProcessor:
    """Qwen2-VL's input processing without its processor class (which insists on a torchvision video
    processor, not installed): the PIL image processor plus the ``<|image_pad|>`` expansion and
    ``mm_token_type_ids`` that Qwen2VLProcessor adds."""

    image_token = "<|image_pad|>"
    chat_template = None

    def __init__(self, image_processor: Any, tokenizer: Any) -> None:
        self.image_processor = image_processor
        self.tokenizer = tokenizer

    def __call__(self, text: str, images: list[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if images:
            pixels = self.image_processor(images=images, return_tensors="pt")
            out.update(pixels)
            parts = text.split(self.image_token)
            counts = [int(g.prod()) // 4 for g in pixels["image_grid_thw"]]
            text = parts[0] + "".join(self.image_token * n + p for n, p in zip(counts, parts[1:], strict=True))
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        out["input_ids"] = ids
        out["mm_token_type_ids"] = (ids == self.tokenizer.convert_tokens_to_ids(self.image_token)).int()
        return out


def test_a_3d_rope_model_gets_positions_per_segment() -> None:
    """Qwen2-VL (tiny, random): each forward's positions continue where the previous ones ended, with frames'
    grids compressed as get_rope_index lays them out, so frames can be appended mid-stream."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    b2u = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                                   "<|video_pad|>"])
    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=56 * 56, patch_size=14, merge_size=2,
                                               temporal_patch_size=2)
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "vocab_size": len(tokenizer), "max_position_embeddings": 4096,
                     "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                     "bos_token_id": None, "eos_token_id": ids("<|im_end|>")},
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"))
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).eval()
    spans: list[tuple[int, int, int]] = []  # (min, max, length) of each forward's positions
    forward = model.forward

    @functools.wraps(forward)
    def recording(*args: Any, **kwargs: Any) -> Any:
        pos = kwargs["position_ids"]
        spans.append((int(pos.min()), int(pos.max()), int(kwargs["input_ids"].shape[1])))
        return forward(*args, **kwargs)

    model.forward = recording  # type: ignore[method-assign]
    engine = TransformersVLMEngine(model=model, processor=QwenShimProcessor(image_processor, tokenizer))
    engine.load(lambda msg: None)
    session = engine.open_session(OPTIONS)
    with session:
        for i in range(3):
            session.push_frame(frame(i)[:48, :48], float(i))
            wait_until(lambda n=i: session.parked and session.counters["frames_fed"] == n + 1, timeout=SLOW)
        session.push_prompt("what?")
        wait_until(lambda: session.parked and session.counters["prompts_fed"] == 1, timeout=SLOW)
    assert spans[0][0] == 0
    for (_, prev_max, _), (lo, _, _) in itertools.pairwise(spans):
        assert lo == prev_max + 1  # every chunk continues the position sequence
    source = session.source
    assert source._next_pos < source.context_tokens  # each frame's 4 image tokens take 2 positions
