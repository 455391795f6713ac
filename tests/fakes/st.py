"""The scripted speech translator: a :class:`SpeechTranslator` (the per-session engine the interpretation policy
talks to) that answers from a script."""

from __future__ import annotations

from typing import Any

from rtc_agent.engines.st import SpeechTranslator, TranslateRequest, Translation

__all__ = ["ScriptedTranslator"]


class ScriptedTranslator(SpeechTranslator):
    """Answers each turn with the next item of ``answers``; records the requests and counts the resets.

    - A ``str`` answer becomes ``Translation(text, source_text="src<n>", prompt_tokens=100 * n,
      completion_tokens=<words>)`` for the n-th request; a :class:`Translation` is returned as it is; an
      ``Exception`` is raised. Once the script has run out every turn is a WAIT (``""``).
    - ``pending`` is a plain attribute the test sets (the translator holds unsaid text).
    """

    name = "scripted"
    pending: bool = False

    def __init__(self, answers: list[Any] | None = None, *, max_model_len: int | None = None) -> None:
        self.answers = list(answers or [])
        self.max_model_len = max_model_len
        self.requests: list[TranslateRequest] = []
        self.pending = False
        self.resets = 0

    async def translate(self, request: TranslateRequest) -> Translation:
        """The next scripted answer to ``request``."""
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else ""
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, Translation):
            return answer
        return Translation(answer, source_text=f"src{len(self.requests)}", prompt_tokens=100 * len(self.requests),
                           completion_tokens=len(answer.split()))

    def reset(self) -> None:
        """A context cut: counted in ``resets``."""
        self.resets += 1
