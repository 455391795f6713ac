"""Shared test fakes: one scripted engine per engine kind, a scripted app context and a scripted worker.

Each scripted engine subclasses the real contract of its kind (the worker's ``Engine`` for ``asr`` and ``vad``,
``TTSEngine``, ``ChatEngine``, ``VLMEngine``, and for speech translation the per-session ``SpeechTranslator``) and
is registered into a real :class:`~rtc_agent.worker.Worker` (:func:`register`), so what a
test exercises around it is the production code. A test that needs behaviour of its own keeps it as a small
subclass of the shared fake.
"""

from tests.fakes.asr import ScriptedASR, transcript_of
from tests.fakes.context import ScriptedAppContext
from tests.fakes.llm import ScriptedChat
from tests.fakes.mt import ScriptedMT
from tests.fakes.st import ScriptedTranslator
from tests.fakes.tts import ScriptedTTS
from tests.fakes.vad import ScriptedVAD, loud_above
from tests.fakes.vlm import ScriptedVLM
from tests.fakes.worker import ScriptedWorker, register

__all__ = ["ScriptedASR", "ScriptedAppContext", "ScriptedChat", "ScriptedMT", "ScriptedTTS", "ScriptedTranslator",
           "ScriptedVAD", "ScriptedVLM", "ScriptedWorker", "loud_above", "register", "transcript_of"]
