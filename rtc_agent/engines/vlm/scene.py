"""The embedded vision backend: a CPU scene describer that speaks the realtime token protocol.

:class:`SceneDescriber` looks at each sampled frame and reports what changed, in short English sentences:

- scene cuts (the colour histogram and the grey levels both jump), with a coarse description of the new view;
- the start of movement (frame differencing), with where it happens (left, middle, right), at most once per
  ``motion_cooldown_s``;
- people appearing and leaving, from OpenCV's packaged Haar face cascade (``cv2.data.haarcascades``). A change in
  the face count that comes with movement is reported at once; one without movement (a detector flicker on a
  still scene) must hold for a second sample first. OpenCV builds without the cascades (OpenCV 5 dropped
  ``CascadeClassifier`` and ``cv2.data``'s XML files) still get cuts and movement; :attr:`SceneDescriber.faces`
  says which mode is on.

:class:`SceneTokenSource` turns those sentences into tokens (one word per token) and says ``<|silence|>`` when
there is nothing to say, so the describer runs behind the same
:class:`~rtc_agent.engines.vlm.realtime.RealtimeVisionSession` as a real model: frames are drained, the loop
parks on silence, prompts open rounds (the describer answers any prompt with a summary of the current view) and
the token rate cap applies. No model weights are involved.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtc_agent.engines.vlm.base import SessionOptions, VLMEngine
from rtc_agent.engines.vlm.chat_format import ELLIPSIS, SILENCE, MossChatFormat, Segment
from rtc_agent.engines.vlm.realtime import RealtimeVisionSession
from rtc_agent.engines.vlm.session import VisionSession

log = logging.getLogger(__name__)

__all__ = ["SceneConfig", "SceneDescriber", "SceneDescriberEngine", "SceneTokenSource", "haar_face_detector"]

FaceBox = tuple[int, int, int, int]
FaceDetector = Callable[[np.ndarray], list[FaceBox]]
"""Finds faces in a grey ``uint8`` image; returns ``(x, y, w, h)`` boxes in that image's pixels."""

_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass(frozen=True)
class SceneConfig:
    """Thresholds of the scene describer (defaults tuned for a 1 fps camera at up to 512 px).

    - ``analysis_edge``: longest edge (px) of the copy used for cuts and movement.
    - ``face_edge``: longest edge (px) of the copy the face detector sees; ``min_face`` its smallest face (px).
    - ``cut_hist``: colour-histogram distance (half the L1 distance of 8x8x8 RGB histograms, 0..1) above which,
      together with ``cut_mad`` (mean absolute grey difference, 0..255), a frame is a scene cut.
    - ``motion_pixel``: grey-level change that makes a pixel "moving"; ``motion_area``: fraction of moving
      pixels that makes the frame "moving".
    - ``motion_cooldown_s``: at most one movement sentence per this many seconds.
    - ``describe_first``: describe the first frame ("I can see ...").
    - ``max_pending``: sentences waiting to be spoken, at most (the oldest is dropped: stale news).
    - ``detect_faces``: use the face cascade when OpenCV has it.
    """

    analysis_edge: int = 160
    face_edge: int = 320
    min_face: int = 24
    cut_hist: float = 0.45
    cut_mad: float = 10.0
    motion_pixel: int = 25
    motion_area: float = 0.004
    motion_cooldown_s: float = 3.0
    describe_first: bool = True
    max_pending: int = 4
    detect_faces: bool = True


def haar_face_detector(min_face: int = 24) -> FaceDetector | None:
    """OpenCV's packaged frontal-face Haar cascade as a :data:`FaceDetector`, or ``None`` when this OpenCV build
    has no ``CascadeClassifier`` or no packaged cascade files."""
    import cv2

    classifier_cls = getattr(cv2, "CascadeClassifier", None)
    folder = getattr(getattr(cv2, "data", None), "haarcascades", None)
    if classifier_cls is None or not folder:
        return None
    path = os.path.join(folder, "haarcascade_frontalface_default.xml")
    if not os.path.exists(path):
        return None
    classifier = classifier_cls(path)
    if classifier.empty():
        return None
    lock = threading.Lock()  # OpenCV classifiers are not documented as thread-safe

    def detect(gray: np.ndarray) -> list[FaceBox]:
        with lock:
            found = classifier.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=6,
                                                minSize=(min_face, min_face))
        return [tuple(int(v) for v in box) for box in found]  # type: ignore[misc]

    return detect


def _resize(image: np.ndarray, edge: int) -> np.ndarray:
    import cv2

    h, w = image.shape[:2]
    scale = edge / max(h, w)
    if scale >= 1.0:
        return image
    return cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)


def _where(x_center: float, width: int) -> str:
    third = x_center / max(1, width)
    return "on the left" if third < 1 / 3 else ("on the right" if third > 2 / 3 else "in the middle")


def _count(n: int) -> str:
    return _NUMBERS[n] if n < len(_NUMBERS) else str(n)


def _people(n: int) -> str:
    return "no one" if n == 0 else ("one person" if n == 1 else f"{_count(n)} people")


def describe_view(rgb: np.ndarray) -> str:
    """A coarse phrase for a view: brightness and dominant colour, e.g. ``"a dark, mostly blue view"``."""
    import cv2

    mean = rgb.reshape(-1, 3).mean(axis=0).astype(np.uint8).reshape(1, 1, 3)  # the view's average colour
    hue, saturation, value = (int(c) for c in cv2.cvtColor(mean, cv2.COLOR_RGB2HSV)[0, 0])
    light = "dark" if value < 80 else ("bright" if value > 170 else "")
    if saturation < 60:
        return {"dark": "a dark view", "bright": "a bright, pale view"}.get(light, "a grey view")
    bounds = ((8, "red"), (20, "orange"), (33, "yellow"), (78, "green"), (95, "cyan"), (130, "blue"),
              (150, "purple"), (170, "pink"), (181, "red"))
    name = next(label for limit, label in bounds if hue < limit)
    return f"a {light + ', ' if light else ''}mostly {name} view"


class SceneDescriber:
    """Watches frames one at a time and returns sentences about what changed (see the module docstring).

    ``observe(image, ts)`` takes an RGB ``uint8`` array (``h, w, 3``; grey ``h, w`` is accepted) with its time in
    seconds; ``summary()`` describes the current view (the answer to any prompt). Not thread-safe.
    """

    def __init__(self, config: SceneConfig | None = None, face_detector: FaceDetector | None = None) -> None:
        self.config = config or SceneConfig()
        self.face_detector = face_detector if self.config.detect_faces else None
        self.reset()

    def reset(self) -> None:
        """Forget everything seen (a new session)."""
        self._prev_gray: np.ndarray | None = None
        self._prev_hist: np.ndarray | None = None
        self._last_rgb: np.ndarray | None = None
        self._faces = 0  # the reported number of people
        self._pending_faces: int | None = None
        self._moving = False
        self._motion_where = ""
        self._last_motion_report = float("-inf")
        self.frames = 0

    @property
    def faces(self) -> bool:
        """Whether people are detected (a face detector is available)."""
        return self.face_detector is not None

    @staticmethod
    def _rgb(image: Any) -> np.ndarray:
        arr = np.asarray(image)
        if arr.ndim == 2:
            arr = np.repeat(arr[..., None], 3, axis=2)
        if arr.ndim != 3 or arr.shape[2] < 3:
            raise ValueError(f"expected an RGB image (h, w, 3), got shape {arr.shape}")
        arr = arr[..., :3]
        if arr.dtype != np.uint8:
            arr = np.clip(arr, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(arr)

    def _detect_faces(self, rgb: np.ndarray) -> list[tuple[float, FaceBox]]:
        """Faces as (x centre as a fraction of the width, box)."""
        if self.face_detector is None:
            return []
        import cv2

        small = _resize(rgb, self.config.face_edge)
        gray = cv2.equalizeHist(cv2.cvtColor(small, cv2.COLOR_RGB2GRAY))
        boxes = self.face_detector(gray)
        width = gray.shape[1]
        return [((x + w / 2) / width, (x, y, w, h)) for x, y, w, h in boxes]

    def observe(self, image: Any, ts: float) -> list[str]:
        import cv2

        cfg = self.config
        rgb = self._rgb(image)
        small = _resize(rgb, cfg.analysis_edge)
        gray = cv2.GaussianBlur(cv2.cvtColor(small, cv2.COLOR_RGB2GRAY), (3, 3), 0)
        hist = cv2.calcHist([small], [0, 1, 2], None, [8, 8, 8], [0, 256, 0, 256, 0, 256]).ravel()
        hist /= max(1.0, float(hist.sum()))
        prev_gray, prev_hist = self._prev_gray, self._prev_hist
        self._prev_gray, self._prev_hist, self._last_rgb = gray, hist, small
        self.frames += 1
        faces = self._detect_faces(rgb)
        n = len(faces)

        if prev_gray is None or prev_hist is None:
            self._faces, self._pending_faces = n, None
            if not cfg.describe_first:
                return []
            people = f" with {_people(n)} in it" if self.faces and n else ""
            return [f"I can see {describe_view(small)}{people}."]

        if prev_gray.shape != gray.shape:  # the camera changed resolution: a new view
            hist_d, mad = 1.0, 255.0
            diff = np.zeros_like(gray)
        else:
            hist_d = 0.5 * float(np.abs(hist - prev_hist).sum())
            diff = cv2.absdiff(gray, prev_gray)
            mad = float(diff.mean())
        if hist_d > cfg.cut_hist and mad > cfg.cut_mad:
            self._faces, self._pending_faces, self._moving = n, None, False
            people = f" {_people(n).capitalize()} {'is' if n == 1 else 'are'} in view." if self.faces and n else ""
            return [f"The scene changed to {describe_view(small)}.{people}"]

        mask = diff > cfg.motion_pixel
        moving = float(mask.mean()) > cfg.motion_area
        if moving:
            cols = np.nonzero(mask)[1]
            self._motion_where = _where(float(cols.mean()), mask.shape[1])
        sentences: list[str] = []
        face_sentence = self._face_change(n, faces, moving)
        if face_sentence:
            sentences.append(face_sentence)
        if (moving and not self._moving and not face_sentence
                and ts - self._last_motion_report >= cfg.motion_cooldown_s):
            sentences.append(f"Something is moving {self._motion_where}.")
            self._last_motion_report = ts
        self._moving = moving
        return sentences

    def _face_change(self, n: int, faces: list[tuple[float, FaceBox]], moving: bool) -> str:
        if not self.faces:
            return ""
        before = self._faces
        if n == before:
            self._pending_faces = None
            return ""
        if not moving and self._pending_faces != n:  # unbacked by movement: confirm on the next sample
            self._pending_faces = n
            return ""
        self._faces, self._pending_faces = n, None
        if n > before:
            if n == 1:
                return f"A person appeared {_where(faces[0][0], 1)}."
            return f"{_count(n).capitalize()} people are in view now."
        if n == 0:
            return "The person left." if before == 1 else "Everyone left."
        return f"Someone left; {_people(n)} {'is' if n == 1 else 'are'} in view."

    def summary(self) -> str:
        """The current view in one sentence (what the describer answers to any prompt)."""
        if self._last_rgb is None:
            return "I have not seen any frame yet."
        people = f"{_people(self._faces)} in " if self.faces else ""
        moving = f"; something is moving {self._motion_where}" if self._moving else ""
        return f"I see {people}{describe_view(self._last_rgb)}{moving}."


_WORD = re.compile(r"\s*\S+")


class SceneTokenSource:
    """A :class:`~rtc_agent.engines.vlm.realtime.TokenSource` over a :class:`SceneDescriber`: each word of a
    sentence is one token; with nothing to say the next token is ``<|silence|>``.

    Frames are analysed when fed; a prompt drops unspoken commentary and queues a summary of the view. At most
    ``config.max_pending`` sentences wait (the oldest is dropped).
    """

    SILENCE_ID = 0
    ELLIPSIS_ID = 1

    def __init__(self, config: SceneConfig | None = None, face_detector: FaceDetector | None = None) -> None:
        self.config = config or SceneConfig()
        self.describer = SceneDescriber(self.config, face_detector)
        self.chat_format = MossChatFormat()
        self.silence_ids = frozenset({self.SILENCE_ID})
        self.suppress_ids = frozenset({self.ELLIPSIS_ID})
        self.wait_for_input_first = True  # nothing to say before the first frame
        self._vocab: list[str] = [SILENCE, ELLIPSIS]
        self._index: dict[str, int] = {}
        self._pending: collections.deque[str] = collections.deque(maxlen=max(1, self.config.max_pending))
        self._words: collections.deque[int] = collections.deque()
        self._spoke = False
        self.sentences = 0

    def begin(self, system_prompt: str, initial_prompt: str) -> None:
        self.describer.reset()
        self._pending.clear()
        self._words.clear()
        self._spoke = False

    def feed(self, segment: Segment) -> None:
        said: list[str] = []
        for image, ts in zip(segment.images, segment.timestamps, strict=True):
            said += self.describer.observe(image, ts)
        if segment.prompts:  # answer the prompt with the current view; older commentary is stale now
            self._pending.clear()
            self._words.clear()
            self._spoke = False
            said = [self.describer.summary()]
        self._pending.extend(said)

    def _token(self, word: str) -> int:
        token = self._index.get(word)
        if token is None:
            token = len(self._vocab)
            self._vocab.append(word)
            self._index[word] = token
        return token

    def next_token(self, suppress: frozenset[int]) -> int:
        if not self._words and self._pending:
            sentence = self._pending.popleft()
            self.sentences += 1
            words = _WORD.findall(sentence)
            if self._spoke and words:
                words[0] = " " + words[0].lstrip()
            self._words.extend(self._token(w) for w in words)
        if not self._words:
            self._spoke = False
            if len(self._vocab) > 8192:  # never reached with the fixed phrasing; a bound all the same
                self._vocab, self._index = [SILENCE, ELLIPSIS], {}
            return self.SILENCE_ID
        self._spoke = True
        return self._words.popleft()

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self._vocab[i] for i in ids if 0 <= i < len(self._vocab))

    def close(self) -> None:
        self._pending.clear()
        self._words.clear()


class SceneDescriberEngine(VLMEngine):
    """The embedded default vision engine (``--vlm-engine embedded``): :class:`SceneTokenSource` sessions."""

    def __init__(self, config: SceneConfig | None = None) -> None:
        super().__init__()
        self.config = config or SceneConfig()
        self.face_detector: FaceDetector | None = None

    def load(self, progress: Callable[[str], None]) -> None:
        import cv2

        if self.config.detect_faces:
            self.face_detector = haar_face_detector(self.config.min_face)
            if self.face_detector is None:
                log.warning("OpenCV %s has no packaged Haar cascades: the scene describer reports cuts and "
                            "movement but not people (install opencv-python-headless<5 for faces)",
                            cv2.__version__)
        progress(f"scene describer ready (OpenCV {cv2.__version__}, faces: "
                 f"{'haar' if self.face_detector else 'off'})")
        self.loaded = True

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> VisionSession:
        source = SceneTokenSource(self.config, self.face_detector)
        return RealtimeVisionSession(
            source, initial_prompt=options.initial_prompt, system_prompt=options.system_prompt,
            frame_queue_size=options.frame_queue_size, max_tokens_per_turn=options.max_tokens_per_turn,
            max_new_tokens=options.max_new_tokens, on_close=release, name="vision-scene")

    def describe(self) -> dict[str, Any]:
        return {"backend": "scene", "faces": "haar" if self.face_detector else "off"}
